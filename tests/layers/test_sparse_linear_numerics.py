"""SparseLinear numerics: every mode's forward and backward against a float64 reference from the
definition with the same mask (and, for fst, the same MVUE draw), row- and column-major layouts,
fst's token padding and 2:4 weight-gradient operand, mask structure, masked decay, unbiasedness of
the fst weight gradient (a bound with power), CPU autocast, and a tiny MLP that learns in every
mode."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kernels import SparseLinear, nm_mask
from kernels.layers.sparse_linear import MODES
from kernels.ops.masked_decay import masked_decay_reference
from kernels.ops.transposable import is_transposable_24, tile_scores
from tests.helpers import assert_close_rel
from tests.layers.sparse_linear_helpers import (
    SPARSE_MODES,
    col_major,
    is_col_major,
    layer_data,
    layer_reference,
    mvue_rows_ref,
    run_layer,
)

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")


def _violations(mean: torch.Tensor, sd: torch.Tensor, n: int, expect: torch.Tensor) -> torch.Tensor:
    """|mean - E| beyond 5 standard errors (plus a hair of rounding slack)."""
    tiny = 1e-6 * expect.abs().max()
    return (mean - expect).abs() > 5 * sd / math.sqrt(n) + tiny


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bias", [True, False])
def test_forward_backward_match_reference(mode, bias):
    torch.manual_seed(1)
    layer = SparseLinear(32, 16, bias=bias, mode=mode, decay=0.05)  # large decay: visible in dW
    x, dy = layer_data((2, 4, 32), 16, seed=2)  # leading dims, T = 8 tokens
    seed = None if layer.mvue_seed is None else int(layer.mvue_seed)
    y, dx, dw, db = run_layer(layer, x, dy)
    mask = layer.mask
    ry, rdx, rdw, rdb = layer_reference(layer, x, dy, mask, seed)
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


@pytest.mark.parametrize("mode", SPARSE_MODES)
@pytest.mark.parametrize("bias", [True, False])
def test_column_major_output_and_input_same_math(mode, bias):
    """output_layout="col" writes the same values column-major; a column-major input (and
    column-major grad_output) gives the same values, dX comes back in the input's layout."""
    torch.manual_seed(1)
    layer = SparseLinear(32, 16, bias=bias, mode=mode, decay=0.05)
    x, dy = layer_data((2, 4, 32), 16, seed=2)
    seed = None if layer.mvue_seed is None else int(layer.mvue_seed)
    ref = layer_reference(layer, x, dy, layer.mask, seed)
    for layout in ("row", "col"):
        for x_in, dy_in in ((x, dy), (col_major(x), col_major(dy))):
            layer.output_layout = layout
            layer.weight.grad = None
            if layer.bias is not None:
                layer.bias.grad = None
            if seed is not None:
                layer.mvue_seed.fill_(seed)
            xi = x_in.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
            y = layer(xi)
            assert is_col_major(y) == (layout == "col") and y.shape == (2, 4, 16)
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
    x, dy = layer_data((3, 2, 16), 8, seed=4)  # T = 6
    seed = int(layer.mvue_seed)
    y, dx, dw, db = run_layer(layer, x, dy)
    ry, rdx, rdw, rdb = layer_reference(layer, x, dy, layer.mask, seed)
    for out, ref in ((y, ry), (dx, rdx), (dw, rdw), (db, rdb)):
        assert_close_rel(out, ref, 1e-6)


def test_fst_gradient_is_2_4_along_tokens_before_the_gemm():
    """dW = MVUE(dY^T) X: with X = identity over tokens, dW - decay term is MVUE(dY^T) itself."""
    torch.manual_seed(5)
    layer = SparseLinear(16, 8, bias=False, mode="fst", decay=0.0)
    x = torch.eye(16)  # T = 16 tokens, X = I
    dy = torch.randn(16, 8)
    seed = int(layer.mvue_seed)
    _, _, dw, _ = run_layer(layer, x, dy)
    g = dw.reshape(8, 4, 4)
    assert ((g != 0).sum(-1) <= 2).all()
    assert torch.equal(dw, mvue_rows_ref(dy.t().contiguous(), seed))


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
    _, _, dw, db = run_layer(layer, x, torch.zeros(4, 16))  # no data gradient: dW is the decay alone
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
    y, dx, dw, db = run_layer(layer, x, dy)
    xr = x.clone().requires_grad_(True)
    ref(xr).backward(dy)
    assert torch.equal(y, ref(x)) and torch.equal(dx, xr.grad)
    assert torch.equal(dw, ref.weight.grad) and torch.equal(db, ref.bias.grad)
    assert layer.backend == "dense" and "dense" in layer.fallback_reason


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


@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_cpu_autocast_bf16(mode):
    torch.manual_seed(16)
    layer = SparseLinear(32, 16, mode=mode, decay=0.01)
    x, dy = layer_data((8, 32), 16, seed=17)
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
    g = mvue_rows_ref(dy16.t().contiguous(), seed).double() if mode == "fst" else dy16.double().t()
    rdw = g @ x16 + 0.01 * layer.weight.detach().double() * (~mask).double()
    assert_close_rel(layer.weight.grad, rdw, 2e-2)
    # the decay is added in float32 after the GEMM: exact on a zero data gradient
    layer.weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(x).backward(torch.zeros(8, 16, dtype=torch.bfloat16))
    assert torch.equal(
        layer.weight.grad, masked_decay_reference(torch.zeros(16, 32), layer.weight.detach(), mask, 0.01)
    )


def test_srste_mask_equals_nm_mask_reference_with_ties():
    """SR-STE's per-forward 2:4 mask (Triton here, via the interpreter) is nm_mask's, ties to the
    lower index."""
    from kernels.ops.nm_mask import nm24_mask, nm_mask_reference

    g = torch.Generator().manual_seed(4)
    w = torch.randint(-2, 3, (32, 64), generator=g).float()
    assert torch.equal(nm24_mask(w), nm_mask_reference(w, 2, 4, dim=1))
    w = torch.randn(48, 128, generator=g)
    assert torch.equal(nm24_mask(w), nm_mask_reference(w, 2, 4, dim=1))


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
