"""SparseLinear (2:4 sparse training layer): every mode's forward and backward against a float64
reference from the definition with the same mask (and, for fst, the same MVUE draw), mask
structure, masked decay, unbiasedness of the fst weight gradient (a bound with power), the mask
schedule and flip rates, bad inputs, nn.Linear drop-in behaviour, autocast, the graph-safe
no-check kernel entry points, a tiny MLP that learns in every mode; GPU-only: cuSPARSELt equals
the fallback, CUDA-graph capture with fresh MVUE draws per replay."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kernels.masked_decay as md_mod
import kernels.mvue as mvue_mod
import kernels.sparse_linear as sl_mod
import kernels.transposable as tr_mod
from kernels import SparseLinear, nm_mask
from kernels.masked_decay import masked_decay_, masked_decay_nocheck_, masked_decay_reference
from kernels.mvue import mvue24, mvue24_nocheck, mvue24_reference, mvue24_seed_tensor, mvue24_uniforms
from kernels.sparse_linear import MODES
from kernels.transposable import is_transposable_24, tile_scores
from tests.helpers import assert_close_rel

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")

SPARSE_MODES = ("fst", "srste", "weight24")
CUDA = torch.cuda.is_available()


@pytest.fixture
def plain_torch(monkeypatch):
    """Run the plain-PyTorch paths of the kernels (fast on CPU; the Triton paths are covered by
    the exact tests, which run them through the interpreter)."""
    for mod in (mvue_mod, md_mod, tr_mod):
        monkeypatch.setattr(mod, "use_triton", lambda t: False)
    return True


def _uniforms(seed: int, n: int, plain: bool) -> torch.Tensor:
    if plain:
        return torch.rand(n, generator=torch.Generator().manual_seed(seed))
    return mvue24_uniforms(seed, n, "cpu")


def _mvue_rows_ref(dyt: torch.Tensor, seed: int, plain: bool = False) -> torch.Tensor:
    """MVUE of dY^T [out, T] along T as the layer draws it (zero-padded to T % 4 == 0)."""
    t = dyt.shape[1]
    pad = (-t) % 4
    xp = F.pad(dyt, (0, pad)).contiguous()
    return mvue24_reference(xp, -1, u=_uniforms(seed, xp.numel() // 4, plain))[:, :t]


def _reference(layer: SparseLinear, x: torch.Tensor, dy: torch.Tensor, mask: torch.Tensor, seed, plain=False):
    """float64 (y, dx, dW, db) from the definition of the layer's mode."""
    w = layer.weight.detach().double()
    x2 = x.detach().reshape(-1, layer.in_features).double()
    dy2 = dy.reshape(-1, layer.out_features)
    wm = w * mask
    y = x2 @ wm.T
    if layer.bias is not None:
        y = y + layer.bias.detach().double()
    dx = dy2.double() @ wm
    g = _mvue_rows_ref(dy2.t().contiguous(), seed, plain).double() if layer.mode == "fst" else dy2.double().t()
    dw = g @ x2
    if layer.mode != "dense":
        dw = dw + layer.decay * w * (~mask).double()
    db = dy2.double().sum(0)
    return y.reshape(*x.shape[:-1], -1), dx.reshape(x.shape), dw, db


def _run(layer: SparseLinear, x: torch.Tensor, dy: torch.Tensor):
    x = x.clone().requires_grad_(True)
    assert layer.weight.grad is None
    y = layer(x)
    y.backward(dy)
    return y, x.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad


def _data(shape, out_features, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    dy = torch.randn(*shape[:-1], out_features, generator=g)
    return x, dy


# --------------------------------------------------------------------------------------------
# forward and backward against the reference (Triton kernels through the interpreter)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bias", [True, False])
def test_forward_backward_match_reference(mode, bias):
    torch.manual_seed(1)
    layer = SparseLinear(32, 16, bias=bias, mode=mode, decay=0.05)  # large decay: visible in dW
    x, dy = _data((2, 4, 32), 16, seed=2)  # leading dims, T = 8 tokens
    seed = None if layer.mvue_seed is None else int(layer.mvue_seed)
    y, dx, dw, db = _run(layer, x, dy)
    mask = layer.mask
    ry, rdx, rdw, rdb = _reference(layer, x, dy, mask, seed)
    assert y.shape == (2, 4, 16) and dx.shape == x.shape and dw.shape == layer.weight.shape
    assert y.dtype == dx.dtype == dw.dtype == torch.float32
    assert_close_rel(y, ry, 1e-6)
    assert_close_rel(dx, rdx, 1e-6)
    assert_close_rel(dw, rdw, 1e-6)
    if bias:
        assert_close_rel(db, rdb, 1e-6)
    if mode == "fst":
        assert int(layer.mvue_seed) == seed + 1  # consumed once, on the device
    else:
        assert layer.mvue_seed is None


def _col_major(t: torch.Tensor) -> torch.Tensor:
    """The same values stored column-major: ``t.movedim(-1, 0)`` contiguous."""
    return t.movedim(-1, 0).contiguous().movedim(0, -1)


def _is_col_major(t: torch.Tensor) -> bool:
    return t.movedim(-1, 0).is_contiguous() and not t.is_contiguous()


@pytest.mark.parametrize("mode", SPARSE_MODES)
@pytest.mark.parametrize("bias", [True, False])
def test_column_major_output_and_input_same_math(mode, bias):
    """output_layout="col" writes the same values column-major; a column-major input (and
    column-major grad_output) gives the same values, dX comes back in the input's layout."""
    torch.manual_seed(1)
    layer = SparseLinear(32, 16, bias=bias, mode=mode, decay=0.05)
    x, dy = _data((2, 4, 32), 16, seed=2)
    seed = None if layer.mvue_seed is None else int(layer.mvue_seed)
    ref = _reference(layer, x, dy, layer.mask, seed)
    for layout in ("row", "col"):
        for x_in, dy_in in ((x, dy), (_col_major(x), _col_major(dy))):
            layer.output_layout = layout
            layer.weight.grad = None
            if layer.bias is not None:
                layer.bias.grad = None
            if seed is not None:
                layer.mvue_seed.fill_(seed)
            xi = x_in.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
            y = layer(xi)
            assert _is_col_major(y) == (layout == "col") and y.shape == (2, 4, 16)
            y.backward(dy_in)
            got = (y, xi.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad)
            for out, want in zip(got, ref, strict=True):
                if out is not None:
                    assert_close_rel(out, want, 1e-6)


def test_output_layout_validated_and_dense_phase_is_row_major():
    with pytest.raises(ValueError, match="output_layout"):
        SparseLinear(16, 8, mode="fst", output_layout="diag")
    layer = SparseLinear(16, 8, mode="fst", output_layout="col")
    with pytest.raises(ValueError, match="output_layout"):
        layer.output_layout = "columns"
    layer.set_dense(True)
    assert layer(torch.randn(4, 16)).is_contiguous()


def test_mlp_first_linear_writes_column_major():
    """The GPT-2 and Llama FFN builders ask their first linear(s) for a column-major output."""
    from repro.models.gpt2 import GPT2Config, mlp
    from repro.models.llama import LlamaConfig, SwiGLU

    cfg = GPT2Config(d_model=32, n_layer=1, n_head=2, vocab_size=64, seq_len=8, ffn_mode="fst")
    m = mlp(cfg)
    assert m.fc.output_layout == "col" and m.proj.output_layout == "row"
    x = torch.randn(2, 8, 32, requires_grad=True)
    m(x).sum().backward()
    assert torch.isfinite(x.grad).all()
    lc = LlamaConfig(hidden=32, ffn=64, layers=1, heads=2, vocab=64, seq_len=8)
    s = SwiGLU(lc, linear_factory=lambda i, o, bias=False: SparseLinear(i, o, bias=bias, mode="fst"))
    assert s.gate.output_layout == s.up.output_layout == "col" and s.down.output_layout == "row"


def test_fst_token_count_not_multiple_of_4_is_padded():
    torch.manual_seed(3)
    layer = SparseLinear(16, 8, mode="fst", decay=0.01)
    x, dy = _data((3, 2, 16), 8, seed=4)  # T = 6
    seed = int(layer.mvue_seed)
    y, dx, dw, db = _run(layer, x, dy)
    ry, rdx, rdw, rdb = _reference(layer, x, dy, layer.mask, seed)
    for out, ref in ((y, ry), (dx, rdx), (dw, rdw), (db, rdb)):
        assert_close_rel(out, ref, 1e-6)


def test_fst_gradient_is_2_4_along_tokens_before_the_gemm():
    """dW = MVUE(dY^T) X: with X = identity over tokens, dW - decay term is MVUE(dY^T) itself."""
    torch.manual_seed(5)
    layer = SparseLinear(16, 8, bias=False, mode="fst", decay=0.0)
    x = torch.eye(16)  # T = 16 tokens, X = I
    dy = torch.randn(16, 8)
    seed = int(layer.mvue_seed)
    _, _, dw, _ = _run(layer, x, dy)
    g = dw.reshape(8, 4, 4)
    assert ((g != 0).sum(-1) <= 2).all()
    assert torch.equal(dw, _mvue_rows_ref(dy.t().contiguous(), seed))


# --------------------------------------------------------------------------------------------
# masks and masked decay
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_mask_structure(mode):
    torch.manual_seed(6)
    layer = SparseLinear(32, 24, mode=mode)
    m = layer.mask
    assert m.dtype == torch.bool and m.shape == layer.weight.shape
    w = layer.weight.detach()
    if mode == "dense":
        assert m.all()
    elif mode == "srste":
        assert torch.equal(m, nm_mask(w, 2, 4, dim=1))
        assert (m.reshape(24, 8, 4).sum(-1) == 2).all()
    else:
        assert is_transposable_24(m) and is_transposable_24(m.t().contiguous())
        # optimal: the retained |W| equals the best of the 90 patterns in every tile (float64)
        best = tile_scores(w).max(-1).values.sum()
        assert math.isclose((w.double().abs() * m).sum().item(), best.item(), rel_tol=1e-12)
    # the property returns a copy: writing to it does not change the layer
    m.fill_(False)
    assert layer.mask.any()


@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_masked_decay_applied_to_pruned_weights_only(mode):
    torch.manual_seed(7)
    layer = SparseLinear(16, 16, mode=mode, decay=0.3)
    x = torch.randn(4, 16)
    _, _, dw, db = _run(layer, x, torch.zeros(4, 16))  # no data gradient: dW is the decay alone
    mask = layer.mask
    expect = masked_decay_reference(torch.zeros(16, 16), layer.weight.detach(), mask, 0.3)
    assert torch.equal(dw, expect)
    assert (dw[mask] == 0).all() and (dw[~mask] != 0).all()
    assert torch.equal(db, torch.zeros(16))


def test_dense_mode_has_no_decay_and_equals_nn_linear():
    torch.manual_seed(8)
    ref = nn.Linear(12, 6)
    torch.manual_seed(8)
    layer = SparseLinear(12, 6, mode="dense", decay=0.5)  # any width: no 2:4 constraint in dense mode
    assert torch.equal(layer.weight, ref.weight) and torch.equal(layer.bias, ref.bias)
    x = torch.randn(3, 5, 12)
    dy = torch.randn(3, 5, 6)
    y, dx, dw, db = _run(layer, x, dy)
    xr = x.clone().requires_grad_(True)
    ref(xr).backward(dy)
    assert torch.equal(y, ref(x)) and torch.equal(dx, xr.grad)
    assert torch.equal(dw, ref.weight.grad) and torch.equal(db, ref.bias.grad)
    assert layer.backend == "dense" and "dense" in layer.fallback_reason


# --------------------------------------------------------------------------------------------
# fst weight gradient: unbiased (statistical bound, with power)
# --------------------------------------------------------------------------------------------


def _violations(mean: torch.Tensor, sd: torch.Tensor, n: int, expect: torch.Tensor) -> torch.Tensor:
    """|mean - E| beyond 5 standard errors (plus a hair of rounding slack)."""
    tiny = 1e-6 * expect.abs().max()
    return (mean - expect).abs() > 5 * sd / math.sqrt(n) + tiny


def test_fst_weight_gradient_unbiased(plain_torch):
    torch.manual_seed(9)
    layer = SparseLinear(8, 8, bias=False, mode="fst", decay=0.05)
    g = torch.Generator().manual_seed(10)
    x = torch.randn(16, 8, generator=g)
    dy = torch.randn(16, 8, generator=g) * torch.exp(torch.randn(16, 8, generator=g))  # some dominant entries
    n = 2000
    draws = torch.empty(n, 8, 8, dtype=torch.float64)
    for k in range(n):
        layer.weight.grad = None
        layer(x).backward(dy)
        draws[k] = layer.weight.grad.double()
    w = layer.weight.detach().double()
    mask = layer.mask
    expect = dy.double().t() @ x.double() + 0.05 * w * (~mask).double()
    mean, sd = draws.mean(0), draws.std(0)
    assert torch.isfinite(draws).all()
    assert sd.max() > 0  # it is random
    bad = _violations(mean, sd, n, expect)
    assert not bad.any(), f"biased at {bad.nonzero().tolist()}"
    # power: a 10% scale error, and the deterministic top-2 pruning of dY^T, are both caught
    assert _violations(1.1 * mean, 1.1 * sd, n, expect).any()
    top2 = (dy.t() * nm_mask(dy.t().contiguous(), 2, 4, dim=1)).double() @ x.double() + 0.05 * w * (~mask).double()
    assert _violations(top2, torch.zeros_like(top2), n, expect).any()


# --------------------------------------------------------------------------------------------
# mask schedule, dense fine-tuning, flip rate
# --------------------------------------------------------------------------------------------


def _opt_mask(w: torch.Tensor) -> torch.Tensor:
    return tr_mod.transposable_mask_reference(w.detach())


@pytest.mark.parametrize("mode", ["fst", "weight24"])
def test_schedule_refresh_and_dense_switch(mode, plain_torch):
    torch.manual_seed(11)
    total, interval = 12, 3  # dense_fraction 1/6: dense once step >= 10
    layer = SparseLinear(16, 16, mode=mode, mask_interval=interval)
    g = torch.Generator().manual_seed(12)
    in_use = layer.mask
    prev_cand = _opt_mask(layer.weight)
    assert torch.equal(in_use, prev_cand)
    for step in range(1, total + 1):
        with torch.no_grad():
            layer.weight.add_(0.2 * torch.randn(16, 16, generator=g))  # big steps: masks change
        layer.after_optimizer_step(step, total)
        if step >= 10:
            assert layer.is_dense and layer.mask.all() and layer.flip_rate is None
            assert layer.backend == "dense" and "dense fine-tuning" in layer.fallback_reason
            x = torch.randn(3, 16)
            assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
            continue
        assert not layer.is_dense
        cand = _opt_mask(layer.weight)
        if step % interval == 0:
            in_use = cand
        assert torch.equal(layer.mask, in_use), step
        expect_flip = (cand != prev_cand).double().mean().item()
        assert 0.0 < layer.flip_rate <= 1.0
        assert layer.flip_rate == pytest.approx(expect_flip, abs=1e-12)
        prev_cand = cand
    # the forward uses the mask in use
    layer.set_dense(False)
    assert not layer.is_dense and torch.equal(layer.mask, _opt_mask(layer.weight))
    x = torch.randn(5, 16)
    assert_close_rel(layer(x), x.double() @ (layer.weight.double() * layer.mask).T + layer.bias.double(), 1e-6)


def test_flip_rate_zero_when_weights_unchanged_and_none_when_untracked(plain_torch):
    torch.manual_seed(13)
    layer = SparseLinear(16, 8, mode="fst", mask_interval=2)
    layer.after_optimizer_step(1, 100)
    assert layer.flip_rate == 0.0
    layer.after_optimizer_step(2, 100)
    assert layer.flip_rate == 0.0
    quiet = SparseLinear(16, 8, mode="weight24", mask_interval=2, track_flip=False)
    before = quiet.mask
    with torch.no_grad():
        quiet.weight.mul_(torch.rand(8, 16))  # reorder magnitudes
    quiet.after_optimizer_step(1, 100)
    assert quiet.flip_rate is None and torch.equal(quiet.mask, before)  # not a refresh step
    quiet.after_optimizer_step(2, 100)
    assert quiet.flip_rate is None and torch.equal(quiet.mask, _opt_mask(quiet.weight))


def test_dense_switch_boundary_and_disabled(plain_torch):
    layer = SparseLinear(8, 8, mode="fst", mask_interval=1000)
    layer.after_optimizer_step(49, 60)
    assert not layer.is_dense
    layer.after_optimizer_step(50, 60)  # (1 - 1/6) * 60 = 50
    assert layer.is_dense
    layer.after_optimizer_step(51, 60)
    assert layer.is_dense  # stays dense
    never = SparseLinear(8, 8, mode="weight24", dense_fraction=0.0)
    never.after_optimizer_step(60, 60)
    assert not never.is_dense
    srste = SparseLinear(8, 8, mode="srste")
    srste.after_optimizer_step(60, 60)
    assert not srste.is_dense  # SR-STE has no dense phase of its own
    srste.set_dense(True)
    assert srste.is_dense and srste.mask.all()


def test_srste_mask_follows_weights_and_flip_rate():
    torch.manual_seed(14)
    layer = SparseLinear(16, 8, mode="srste")
    x = torch.randn(4, 16)
    layer(x)
    m0 = nm_mask(layer.weight.detach(), 2, 4, dim=1)
    layer.after_optimizer_step(1, 10)
    assert layer.flip_rate is None  # nothing to compare with yet
    with torch.no_grad():
        layer.weight.mul_(torch.rand(8, 16) + 0.5)
    y = layer(x)
    m1 = nm_mask(layer.weight.detach(), 2, 4, dim=1)
    assert not torch.equal(m0, m1)
    assert_close_rel(y, x.double() @ (layer.weight.double() * m1).T + layer.bias.double(), 1e-6)
    layer.after_optimizer_step(2, 10)
    assert layer.flip_rate == pytest.approx((m1 != m0).double().mean().item(), abs=1e-12)
    layer(x)
    layer.after_optimizer_step(3, 10)
    assert layer.flip_rate == 0.0


# --------------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------------


def test_bad_construction():
    with pytest.raises(ValueError, match="valid modes: fst, srste, weight24, dense"):
        SparseLinear(16, 16, mode="half")
    with pytest.raises(ValueError, match="in_features=30 is not divisible by 4"):
        SparseLinear(30, 16)
    with pytest.raises(ValueError, match="out_features=18 is not divisible by 4"):
        SparseLinear(32, 18, mode="weight24")
    with pytest.raises(ValueError, match="in_features=30"):
        SparseLinear(30, 16, mode="srste")
    SparseLinear(32, 18, mode="srste")  # SR-STE groups run along in only
    SparseLinear(30, 18, mode="dense")
    with pytest.raises(TypeError, match="in_features must be an int"):
        SparseLinear(16.0, 16)
    with pytest.raises(ValueError, match="mask_interval"):
        SparseLinear(16, 16, mask_interval=0)
    with pytest.raises(ValueError, match="decay"):
        SparseLinear(16, 16, decay=-1e-3)
    with pytest.raises(ValueError, match="decay"):
        SparseLinear(16, 16, decay=float("nan"))
    with pytest.raises(ValueError, match="dense_fraction"):
        SparseLinear(16, 16, dense_fraction=1.5)
    with pytest.raises(TypeError, match="track_flip"):
        SparseLinear(16, 16, track_flip=1)
    with pytest.raises(TypeError, match="weight dtype"):
        SparseLinear(16, 16, dtype=torch.float64)


def test_bad_forward_inputs(monkeypatch):
    layer = SparseLinear(16, 8, mode="fst")
    with pytest.raises(ValueError, match="in_features=16"):
        layer(torch.randn(4, 12))
    with pytest.raises(ValueError, match="in_features=16"):
        layer(torch.tensor(1.0))
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer([1.0] * 16)
    with pytest.raises(TypeError, match="dtype"):
        layer(torch.ones(4, 16, dtype=torch.int32))
    with pytest.raises(TypeError, match="dtype"):
        layer(torch.randn(4, 16, dtype=torch.float64))
    bad = torch.randn(4, 16)
    bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        layer(bad)
    inf = torch.randn(4, 16)
    inf[0, 0] = float("inf")
    with pytest.raises(ValueError, match="NaN or Inf"):
        layer(inf)
    # a NaN in the incoming gradient is refused too
    y = layer(torch.randn(4, 16))
    with pytest.raises(ValueError, match="grad_output"):
        y.backward(torch.full_like(y, float("nan")))
    # without checks nothing is scanned: the NaN propagates (visible, not hidden)
    fast = SparseLinear(16, 8, mode="fst", checks=False)
    assert torch.isnan(fast(bad)).any()


def test_bad_schedule_calls():
    layer = SparseLinear(16, 8, mode="fst")
    with pytest.raises(ValueError, match="step"):
        layer.after_optimizer_step(-1, 10)
    with pytest.raises(ValueError, match="total_steps"):
        layer.after_optimizer_step(1, 0)
    with pytest.raises(TypeError, match="step"):
        layer.after_optimizer_step(1.0, 10)
    with pytest.raises(TypeError, match="bool"):
        layer.set_dense(1)
    with pytest.raises(ValueError, match="no sparse phase"):
        SparseLinear(16, 8, mode="dense").set_dense(False)
    nan_w = SparseLinear(16, 8, mode="weight24")
    with torch.no_grad():
        nan_w.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        nan_w.after_optimizer_step(40, 100)
    with pytest.raises(ValueError, match="NaN"):
        nan_w(torch.randn(2, 16))


# --------------------------------------------------------------------------------------------
# nn.Linear drop-in
# --------------------------------------------------------------------------------------------


def test_drop_in_state_dict_and_shapes():
    torch.manual_seed(15)
    ref = nn.Linear(32, 16)
    torch.manual_seed(15)
    layer = SparseLinear(32, 16, mode="fst")
    assert isinstance(layer, nn.Linear)
    assert torch.equal(layer.weight, ref.weight)  # same initialisation as nn.Linear
    assert set(layer.state_dict()) == {"weight", "bias"}
    assert set(SparseLinear(32, 16, bias=False, mode="srste").state_dict()) == {"weight"}
    assert "mode='fst'" in repr(layer)
    # load an nn.Linear checkpoint, also through a parent module: the mask follows the weights
    other = nn.Linear(32, 16)
    seq = nn.Sequential(layer)
    seq.load_state_dict(nn.Sequential(other).state_dict())
    assert torch.equal(layer.weight, other.weight)
    assert torch.equal(layer.mask, _opt_mask(other.weight))
    nn.Linear(32, 16).load_state_dict(layer.state_dict())
    # any leading shape, including none
    for shape in [(32,), (5, 32), (2, 3, 4, 32)]:
        x = torch.randn(shape)
        y = layer(x)
        assert y.shape == (*shape[:-1], 16)
        assert_close_rel(y, x.double() @ (layer.weight.double() * layer.mask).T + layer.bias.double(), 1e-6)
    # nn.init applied after construction (as GPT-2's _init_weights does): the first use sees it
    late = SparseLinear(16, 16, mode="weight24")
    nn.init.normal_(late.weight, std=0.02)
    assert torch.equal(late.mask, _opt_mask(late.weight))


@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_sparse_state_round_trip_resumes_exactly(mode, plain_torch):
    """state_dict (nn.Linear's keys) + sparse_state_dict restore the run: same masks, same MVUE draws."""
    torch.manual_seed(25)
    a = SparseLinear(16, 16, mode=mode, mask_interval=3)
    x, dy = _data((8, 16), 16, seed=26)
    opt = torch.optim.SGD(a.parameters(), lr=0.5)
    for step in range(1, 6):
        opt.zero_grad()
        a(x).backward(dy)
        opt.step()
        a.after_optimizer_step(step, 100)
    b = SparseLinear(16, 16, mode=mode, mask_interval=3)
    b.load_state_dict(a.state_dict())
    b.load_sparse_state_dict(a.sparse_state_dict())
    assert torch.equal(b.mask, a.mask)
    for layer in (a, b):
        layer.weight.grad = layer.bias.grad = None
        layer.after_optimizer_step(6, 100)  # a refresh step
    assert torch.equal(b.mask, a.mask) and a.flip_rate == b.flip_rate
    ra, rb = _run(a, x, dy), _run(b, x, dy)
    for u, v in zip(ra, rb, strict=True):
        assert torch.equal(u, v)
    if a.flip_rate is not None:
        assert float(a.flip_rate_tensor) == pytest.approx(a.flip_rate)
    with pytest.raises(ValueError, match="mode"):
        SparseLinear(16, 16, mode="dense").load_sparse_state_dict(a.sparse_state_dict())
    bad = a.sparse_state_dict()
    bad["mask"] = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="shape"):
        b.load_sparse_state_dict(bad)


def test_backend_on_cpu_says_why_once():
    layer = SparseLinear(64, 64, mode="weight24")
    assert layer.backend == "dense" and "CUDA" in layer.fallback_reason
    with pytest.warns(UserWarning, match="dense fallback.*CUDA"):
        layer(torch.randn(64, 64))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(torch.randn(64, 64))  # only once per reason
    layer.use_cusparselt = False
    with pytest.warns(UserWarning, match="use_cusparselt is False"):
        layer(torch.randn(64, 64))
    assert layer.fallback_reason == "use_cusparselt is False"


@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_cpu_autocast_bf16(mode):
    torch.manual_seed(16)
    layer = SparseLinear(32, 16, mode=mode, decay=0.01)
    x, dy = _data((8, 32), 16, seed=17)
    xr = x.clone().requires_grad_(True)
    seed = None if layer.mvue_seed is None else int(layer.mvue_seed)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(xr)
    assert y.dtype == torch.bfloat16
    y.backward(dy.bfloat16())
    assert xr.grad.dtype == torch.float32 and layer.weight.grad.dtype == torch.float32
    assert layer.bias.grad.dtype == torch.float32
    mask = layer.mask
    w16 = layer.weight.detach().bfloat16().double() * mask
    x16 = x.bfloat16().double()
    dy16 = dy.bfloat16()
    assert_close_rel(y, x16 @ w16.T + layer.bias.detach().bfloat16().double(), 1e-2)
    assert_close_rel(xr.grad, dy16.double() @ w16, 1e-2)
    g = _mvue_rows_ref(dy16.t().contiguous(), seed).double() if mode == "fst" else dy16.double().t()
    rdw = g @ x16 + 0.01 * layer.weight.detach().double() * (~mask).double()
    assert_close_rel(layer.weight.grad, rdw, 2e-2)
    # the decay is added in float32 after the GEMM: exact on a zero data gradient
    layer.weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(x).backward(torch.zeros(8, 16, dtype=torch.bfloat16))
    assert torch.equal(
        layer.weight.grad, masked_decay_reference(torch.zeros(16, 32), layer.weight.detach(), mask, 0.01)
    )


# --------------------------------------------------------------------------------------------
# the graph-safe kernel entry points
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,dim", [((8, 32), -1), ((16, 6), 0), ((2, 8, 5), 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mvue24_nocheck_equals_mvue24_and_advances_seed(shape, dim, dtype):
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(18)) * 3).to(dtype)
    st = torch.tensor([2**40 + 5], dtype=torch.int64)
    n = x.numel()
    buf = torch.full((n + 16,), float("nan"), dtype=dtype)  # poisoned, with a tail
    mbuf = torch.ones(n + 16, dtype=torch.bool)
    out = mvue24_nocheck(x, dim, seed_tensor=st, out=buf[:n].view(shape), mask_out=mbuf[:n].view(shape))
    ref, ref_mask = mvue24(x, dim, seed=2**40 + 5, return_mask=True)
    assert out.data_ptr() == buf.data_ptr()
    assert torch.equal(out, ref) and torch.equal(mbuf[:n].view(shape), ref_mask)
    assert torch.isnan(buf[n:]).all() and mbuf[n:].all()
    assert int(st) == 2**40 + 6
    again = mvue24_nocheck(x, dim, seed_tensor=st)
    assert torch.equal(again, mvue24(x, dim, seed=2**40 + 6)) and int(st) == 2**40 + 7
    assert torch.equal(again, mvue24_reference(x, dim, u=mvue24_uniforms(2**40 + 6, n // 4, "cpu")))


def test_mvue24_nocheck_plain_path_and_bad_metadata(plain_torch):
    x = torch.randn(8, 16)
    st = mvue24_seed_tensor()
    s = int(st)
    assert 0 <= s < 2**62
    assert torch.equal(mvue24_nocheck(x, 0, seed_tensor=st), mvue24(x, 0, seed=s)) and int(st) == s + 1
    with pytest.raises(TypeError, match="int64"):
        mvue24_nocheck(x, seed_tensor=torch.zeros(1, dtype=torch.int32))
    with pytest.raises(TypeError, match="one element"):
        mvue24_nocheck(x, seed_tensor=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(TypeError, match="seed_tensor"):
        mvue24_nocheck(x, seed_tensor=3)
    with pytest.raises(ValueError, match="out must be contiguous"):
        mvue24_nocheck(x, seed_tensor=st, out=torch.empty(16, 8).t())
    with pytest.raises(TypeError, match="out has dtype"):
        mvue24_nocheck(x, seed_tensor=st, out=torch.empty(8, 16, dtype=torch.float16))
    with pytest.raises(ValueError, match="divisible"):
        mvue24_nocheck(torch.randn(8, 6), seed_tensor=st)


@pytest.mark.parametrize("plain", [False, True])
def test_masked_decay_nocheck_equals_checked(plain, monkeypatch):
    if plain:
        monkeypatch.setattr(md_mod, "use_triton", lambda t: False)
    g0 = torch.Generator().manual_seed(19)
    for dtype in (torch.float32, torch.bfloat16):
        n = 300
        buf = torch.full((n + 8,), float("nan"), dtype=dtype)
        grad = buf[:n].view(20, 15)
        grad.copy_(torch.randn(20, 15, generator=g0))
        weight = torch.randn(20, 15, generator=g0).to(dtype)
        mask = torch.rand(20, 15, generator=g0) < 0.5
        expect = masked_decay_(grad.clone(), weight, mask, 0.37)
        assert masked_decay_nocheck_(grad, weight, mask, 0.37) is grad
        assert torch.equal(grad, expect) and torch.isnan(buf[n:]).all()
    with pytest.raises(ValueError, match="contiguous"):
        masked_decay_nocheck_(torch.zeros(8, 8).t(), torch.zeros(8, 8), torch.zeros(8, 8, dtype=torch.bool), 1.0)
    with pytest.raises(TypeError, match="must match"):
        masked_decay_nocheck_(torch.zeros(4), torch.zeros(4, dtype=torch.float16), torch.zeros(4, dtype=torch.bool), 1)
    with pytest.raises(ValueError, match="one shape"):
        masked_decay_nocheck_(torch.zeros(4), torch.zeros(4), torch.zeros(8, dtype=torch.bool), 1.0)


# --------------------------------------------------------------------------------------------
# the persistent packed pair of fst/weight24 (cuSPARSELt emulated on the CPU: our packing runs
# through the interpreter, the GEMM multiplies the unpacked operand)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fst", "weight24"])
def test_packed_pair_follows_weights_and_masks_in_place(mode, emulated_cusparselt):
    """The pair packed on first use is rewritten in place: values from the new weights every
    forward (the mask unchanged), values and metadata when the mask changes (schedule refresh,
    set_dense(False), load_sparse_state_dict); outputs and dX always equal the reference with
    the mask in use."""
    torch.manual_seed(31)
    layer = SparseLinear(128, 64, mode=mode, mask_interval=2, decay=0.0, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(32)
    x = torch.randn(64, 128, generator=g).bfloat16()
    dy = torch.randn(64, 64, generator=g).bfloat16()

    def check() -> None:
        xg = x.clone().requires_grad_(True)
        y = layer(xg)
        assert layer.backend == "cusparselt"
        y.backward(dy)
        layer.weight.grad = layer.bias.grad = None
        ry, rdx, _, _ = _reference(layer, x.float(), dy.float(), layer.mask, 0)  # dW not compared
        assert_close_rel(y, ry, 1e-2)
        assert_close_rel(xg.grad, rdx, 1e-2)

    check()
    (pair,) = layer._pairs.values()
    ptrs = [t.data_ptr() for t in pair]
    masks = [layer.mask]
    for step in (1, 2, 3):
        with torch.no_grad():  # an optimizer step: new values, and at step 2 a new mask
            layer.weight.mul_(torch.rand(layer.weight.shape, generator=g).bfloat16() + 0.5)
        layer.after_optimizer_step(step, 10**6)
        masks.append(layer.mask)
        check()
        assert [t.data_ptr() for t in layer._pairs[next(iter(layer._pairs))]] == ptrs
    assert torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    state = layer.sparse_state_dict()
    layer.set_dense(True)
    assert layer._pairs == {}
    layer.set_dense(False)
    check()
    with torch.no_grad():
        layer.weight.mul_(-1.5)
    layer.load_sparse_state_dict(state)  # the mask of step 3, not the weights' own
    check()
    assert torch.equal(layer.mask, masks[-1])
    (pair,) = layer._pairs.values()  # packed afresh after the dense phase
    ptrs = [t.data_ptr() for t in pair]
    layer.after_optimizer_step(4, 10**6)
    check()
    assert [t.data_ptr() for t in layer._pairs[next(iter(layer._pairs))]] == ptrs  # repacked in place


# --------------------------------------------------------------------------------------------
# a tiny MLP learns in every mode
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_tiny_mlp_trains(mode, plain_torch):
    torch.manual_seed(20)
    steps = 40
    model = nn.Sequential(
        SparseLinear(16, 32, mode=mode, mask_interval=5, decay=6e-5),
        nn.ReLU(),
        SparseLinear(32, 8, mode=mode, mask_interval=5, decay=6e-5),
    )
    g = torch.Generator().manual_seed(21)
    x = torch.randn(64, 16, generator=g)
    target = torch.tanh(x @ torch.randn(16, 8, generator=g))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    losses = []
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        for m in model.modules():
            if hasattr(m, "after_optimizer_step"):
                m.after_optimizer_step(step, steps)
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.5 * losses[0], losses
    if mode in ("fst", "weight24"):
        assert model[0].is_dense  # the last sixth ran dense
    if mode in SPARSE_MODES:
        assert model[2].flip_rate is None or 0.0 <= model[2].flip_rate <= 1.0


# --------------------------------------------------------------------------------------------
# GPU only: cuSPARSELt path and CUDA graphs
# --------------------------------------------------------------------------------------------


def gpu(fn):  # noqa: ANN001, ANN201 (a decorator)
    """GPU-only test: marked ``gpu`` (the campaign selects them with ``-m gpu``), skipped elsewhere."""
    return pytest.mark.gpu(pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")(fn))


def _gpu_layer(mode, dtype=torch.bfloat16, out=256, inp=512, checks=False):
    torch.manual_seed(22)
    return SparseLinear(inp, out, mode=mode, decay=1e-2, checks=checks, device="cuda", dtype=dtype)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", SPARSE_MODES)
@pytest.mark.parametrize("dtype,checks", [(torch.bfloat16, False), (torch.float16, True)])
def test_cusparselt_matches_fallback(mode, dtype, checks):
    from kernels.sparse_gemm import cusparselt_available

    if not cusparselt_available():
        pytest.skip("torch has no cuSPARSELt")
    layer = _gpu_layer(mode, dtype=dtype, checks=checks)
    g = torch.Generator(device="cuda").manual_seed(23)
    x = torch.randn(2, 64, 512, device="cuda", dtype=dtype, generator=g)
    dy = torch.randn(2, 64, 256, device="cuda", dtype=dtype, generator=g)
    results = {}
    for use in (True, False):
        layer.use_cusparselt = use
        if layer.mvue_seed is not None:
            layer.mvue_seed.fill_(1234)
        layer.weight.grad = layer.bias.grad = None
        res = _run(layer, x, dy)
        assert layer.backend == ("cusparselt" if use else "dense"), layer.fallback_reason
        results[use] = [t.float() for t in res]
    for a, b in zip(results[True], results[False], strict=True):
        assert_close_rel(a, b, 1e-2)
    ry, rdx, rdw, rdb = _reference(layer, x.float(), dy.float(), layer.mask, None) if mode != "fst" else (None,) * 4
    if mode != "fst":
        assert_close_rel(results[True][0], ry, 2e-2)
        assert_close_rel(results[True][1], rdx, 2e-2)
        assert_close_rel(results[True][2], rdw, 2e-2)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_cusparselt_column_major_layouts_match_row_major(mode):
    """On cuSPARSELt: column-major output (transpose_result off, bias per row in the epilogue),
    column-major input (B read without a copy), column-major grad_output (MVUE packed from
    rows) give what the row-major path gives (same mask and MVUE seed)."""
    from kernels.sparse_gemm import cusparselt_available

    if not cusparselt_available():
        pytest.skip("torch has no cuSPARSELt")
    layer = _gpu_layer(mode)
    g = torch.Generator(device="cuda").manual_seed(25)
    x = torch.randn(2, 64, 512, device="cuda", dtype=torch.bfloat16, generator=g)
    dy = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16, generator=g)
    results = {}
    for layout in ("row", "col"):
        for inp in ("row", "col"):
            layer.output_layout = layout
            layer.weight.grad = layer.bias.grad = None
            if layer.mvue_seed is not None:
                layer.mvue_seed.fill_(99)
            xi = (x if inp == "row" else _col_major(x)).clone(memory_format=torch.preserve_format)
            dyi = dy if inp == "row" else _col_major(dy)
            xi.requires_grad_(True)
            y = layer(xi)
            assert layer.backend == "cusparselt", layer.fallback_reason
            assert _is_col_major(y) == (layout == "col")
            y.backward(dyi)
            results[layout, inp] = [t.float() for t in (y, xi.grad, layer.weight.grad, layer.bias.grad)]
    for key, res in results.items():
        for a, b in zip(res, results["row", "row"], strict=True):
            assert torch.isfinite(a).all(), key
            assert_close_rel(a, b, 1e-2)


@pytest.mark.gpu
@gpu
def test_cuda_autocast_uses_cusparselt_with_fp32_master():
    from kernels.sparse_gemm import cusparselt_available

    if not cusparselt_available():
        pytest.skip("torch has no cuSPARSELt")
    layer = _gpu_layer("fst", dtype=torch.float32)
    x = torch.randn(128, 512, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16 and layer.backend == "cusparselt", layer.fallback_reason
    y.float().pow(2).mean().backward()
    assert layer.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    assert torch.isfinite(layer.weight.grad).all() and torch.isfinite(x.grad).all()


@pytest.mark.gpu
@gpu
def test_cuda_refused_token_count_falls_back_with_same_math():
    layer = _gpu_layer("fst", checks=True)
    x, dy = (t.cuda().bfloat16() for t in _data((2, 50, 512), 256, seed=24))  # T = 100: not a multiple of 16
    seed = int(layer.mvue_seed)
    with pytest.warns(UserWarning, match="100 columns"):
        y, dx, dw, db = _run(layer, x, dy)
    assert layer.backend == "dense" and "100 columns" in layer.fallback_reason
    mask = layer.mask
    w = layer.weight.double() * mask
    assert_close_rel(y, x.double() @ w.T + layer.bias.double(), 1e-2)
    assert_close_rel(dx, dy.double() @ w, 1e-2)
    dyt = dy.reshape(100, 256).t().contiguous()
    g = mvue24(dyt, -1, seed=seed).double()  # T % 4 == 0: no padding
    rdw = g @ x.reshape(100, 512).double() + 1e-2 * layer.weight.double() * (~mask).double()
    assert_close_rel(dw, rdw, 1e-2)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_cuda_graph_capture_and_fresh_mvue_draws(mode):
    layer = _gpu_layer(mode)
    x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # eager warm-up: initial mask, algorithm search
        for _ in range(2):
            layer.weight.grad = layer.bias.grad = None
            layer(x).backward(dy)
    torch.cuda.current_stream().wait_stream(s)
    layer.weight.grad = layer.bias.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = layer(x)
        y.backward(dy)
    grads, seeds = [], []
    for _ in range(2):
        seeds.append(None if layer.mvue_seed is None else int(layer.mvue_seed))
        graph.replay()
        torch.cuda.synchronize()
        grads.append(layer.weight.grad.clone())
    mask = layer.mask
    ry, rdx, rdw, rdb = _reference(layer, x.float(), dy.float(), mask, None) if mode != "fst" else (None,) * 4
    assert torch.isfinite(y).all() and torch.isfinite(grads[0]).all()
    if mode == "fst":
        assert seeds[1] == seeds[0] + 1 and int(layer.mvue_seed) == seeds[0] + 2
        assert not torch.equal(grads[0], grads[1])  # each replay draws afresh
        for grad, seed in zip(grads, seeds, strict=True):
            g = mvue24(dy.t().contiguous(), -1, seed=seed).double()
            expect = g @ x.double() + 1e-2 * layer.weight.double() * (~mask).double()
            assert_close_rel(grad, expect, 2e-2)
    else:
        assert torch.equal(grads[0], grads[1])
        assert_close_rel(grads[0], rdw, 2e-2)
    # new weights (an optimizer step, mask unchanged): the replay's packed values follow them
    if mode != "srste":
        with torch.no_grad():
            layer.weight.mul_(0.5).add_(0.01)
        layer.after_optimizer_step(1, 10**6)  # not a refresh step
        assert torch.equal(layer.mask, mask)
        graph.replay()
        torch.cuda.synchronize()
        assert_close_rel(y, x.double() @ (layer.weight.double() * mask).T + layer.bias.double(), 2e-2)
    # a new mask written outside the graph is seen by the next replay
    if mode != "srste":
        with torch.no_grad():
            layer.weight.mul_(torch.rand_like(layer.weight) + 0.5)
        layer.after_optimizer_step(layer.mask_interval, 10**6)
        new_mask = layer.mask
        assert not torch.equal(new_mask, mask)
        graph.replay()
        torch.cuda.synchronize()
        ref_y = x.double() @ (layer.weight.double() * new_mask).T + layer.bias.double()
        assert_close_rel(y, ref_y, 2e-2)


def test_srste_mask_equals_nm_mask_reference_with_ties():
    """SR-STE's per-forward 2:4 mask (Triton here, via the interpreter) is nm_mask's, ties to the
    lower index."""
    from kernels.nm_mask import nm_mask_reference
    from kernels.sparse_linear import _nm24_mask

    g = torch.Generator().manual_seed(4)
    w = torch.randint(-2, 3, (32, 64), generator=g).float()
    assert torch.equal(_nm24_mask(w), nm_mask_reference(w, 2, 4, dim=1))
    w = torch.randn(48, 128, generator=g)
    assert torch.equal(_nm24_mask(w), nm_mask_reference(w, 2, 4, dim=1))


@pytest.mark.gpu
@gpu
def test_gemm24_only_ceiling_layer_forward_and_dx_exact():
    """The timing-only ceiling layer of the speed suites (suites._training_bench.Gemm24Only) runs
    the fst GEMMs: its output and input gradient equal the masked dense reference."""
    from kernels.sparse_gemm import cusparselt_available
    from suites._training_bench import Gemm24Only

    if not cusparselt_available():
        pytest.skip("torch has no cuSPARSELt")
    torch.manual_seed(26)
    layer = Gemm24Only(512, 256).cuda()
    layer.output_layout = "col"
    x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    y = layer(x)
    y.backward(dy)
    w = layer.weight.double() * layer.mask
    assert _is_col_major(y)
    assert_close_rel(y, x.double() @ w.T + layer.bias.double(), 1e-2)
    assert_close_rel(x.grad, dy.double() @ w, 1e-2)
    assert layer.weight.grad.dtype == torch.float32 and torch.isfinite(layer.weight.grad).all()


@pytest.mark.parametrize("mode", ["fst", "weight24"])
def test_decay_from_pruned_entries_follows_the_mask(mode, emulated_cusparselt, monkeypatch):
    """On the graph-safe cuSPARSELt path the backward decays from the pruned entries that the
    forward's values refresh wrote: the gradient's decay term is alpha * W*(~M) (W rounded to
    bf16) with this step's W and M, also in the step right after a mask change."""
    g = torch.Generator().manual_seed(52)
    x = torch.randn(64, 128, generator=g).bfloat16()
    dy = torch.randn(64, 64, generator=g).bfloat16()

    def unused(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("decayed from the fp32 weight and the mask, not the pruned entries")

    monkeypatch.setattr(sl_mod, "masked_decay_cast_nocheck", unused)

    def run(decay: float) -> tuple[list, SparseLinear]:
        torch.manual_seed(53)
        layer = SparseLinear(128, 64, mode=mode, mask_interval=2, decay=decay, checks=False, seed=5)
        steps, gw = [], torch.Generator().manual_seed(54)
        for step in (1, 2, 3):
            w, m = layer.weight.detach().clone(), layer.mask.clone()
            with torch.autocast("cpu", torch.bfloat16):
                layer(x).backward(dy)
            steps.append((layer.weight.grad.clone(), w, m))
            layer.weight.grad = None
            with torch.no_grad():
                layer.weight.mul_(torch.rand(layer.weight.shape, generator=gw) + 0.5)  # new mask at step 2's refresh
            layer.after_optimizer_step(step, 10**6)
        return steps, layer

    with_decay, layer = run(0.25)
    without, _ = run(0.0)
    assert set(layer._pruned) == set(layer._pairs) and len(layer._pruned) == 1
    assert not torch.equal(with_decay[1][2], with_decay[2][2])  # the mask changed before step 3
    for (ga, w, m), (gb, _, _) in zip(with_decay, without, strict=True):
        assert_close_rel(ga - gb, 0.25 * torch.where(m, 0.0, w), 2e-3)


def test_no_process_wide_switch():
    """Checks are a per-layer choice (``checks=False``): no module flag changes every layer."""
    assert not hasattr(sl_mod, "FAST_PATH")
    assert SparseLinear(16, 8, mode="fst", checks=False)._checks() is False
    assert SparseLinear(16, 8, mode="fst")._checks() is True
