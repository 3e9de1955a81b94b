"""``torch.compile`` of SparseLinear (every mode) and of the gated activations: the custom ops of
``kernels.ops.compile_ops`` pass ``torch.library.opcheck`` (schema, fake tensors, autograd
registration, AOT dispatch), a compiled layer traces whole (``fullgraph=True``) and gives what the
eager layer gives (output, dX, dW with the same MVUE draws, the seed advanced alike), on the
fallback path and on the emulated cuSPARSELt path, and a compiled GPT-2 trains step for step like
the eager one (mask refreshes and the dense phase included). GPU tests: compiled vs eager under
bf16 autocast on cuSPARSELt."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import kernels.ops.compile_ops as co
from kernels import SparseLinear
from kernels.layers.sparse_activation import fst_gated
from repro.models.gpt2 import GPT2Config, build_gpt2

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")

MODES = ("fst", "srste", "weight24", "dense")
CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _op_cases():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(32, 64, generator=g)
    mask = co.transposable_mask(w)
    x = torch.randn(16, 64, generator=g, requires_grad=True)
    weight = torch.randn(32, 64, generator=g, requires_grad=True)
    bias = torch.randn(32, generator=g, requires_grad=True)
    seed = torch.tensor([3], dtype=torch.int64)
    dy = torch.randn(16, 32, generator=g)
    z = torch.randn(4, 64, generator=g, requires_grad=True)
    return {
        "transposable_mask": (co.transposable_mask, (w,)),
        "nm24_mask": (co.nm24_mask, (w,)),
        "take_seed": (co.take_seed, (seed.clone(),)),
        "linear_fst": (co.linear, (x, weight, bias, mask, seed, "fst", 1e-3, True, False)),
        "linear_srste": (co.linear, (x, weight, None, mask, seed, "srste", 0.0, True, False)),
        "linear_backward": (
            co.linear_backward,
            (dy, x.detach(), weight.detach(), mask, seed, "fst", 1e-3, True, False, True, True),
        ),
        "linear_act_gelu": (
            co.linear_act,
            (x, weight, bias, mask, seed, "fst", 1e-3, True, False, None, None, None, "gelu", "tanh"),
        ),
        "linear_act_backward_gelu": (
            co.linear_act_backward,
            (dy, torch.randn(16, 32, generator=g), x.detach(), weight.detach(), mask, seed, "fst", 1e-3, True, False)
            + ("gelu", "tanh", True, True, True),
        ),
        "gated_geglu": (co.gated, (z, "geglu", "tanh")),
        "gated_backward_swiglu": (co.gated_backward, (z.detach(), torch.randn(4, 32, generator=g), "swiglu", "none")),
    }


@pytest.mark.parametrize("name", list(_op_cases()))
def test_custom_op_passes_opcheck(name):
    op, args = _op_cases()[name]
    torch.library.opcheck(op, args)


def test_pair_ops_pass_opcheck(emulated_cusparselt, monkeypatch):
    """``repack_pair`` (in place, both refreshes, with and without pruned entries) and ``linear`` /
    ``linear_backward`` reading the packed pair, on the emulated cuSPARSELt path."""
    import kernels.layers.sparse_linear as sl_mod

    monkeypatch.setattr(co, "cslt_mm_packed", sl_mod.cslt_mm_packed)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 128, generator=g)
    mask = co.transposable_mask(w)
    (pr, pc), (tr, tc) = co.pair_shapes(64, 128)
    packed, packed_t = (torch.zeros(pr, pc, dtype=torch.bfloat16), torch.zeros(tr, tc, dtype=torch.bfloat16))
    co.repack_pair(w, mask, packed, packed_t, None, False)
    pruned = torch.empty(64, 64, dtype=torch.bfloat16)
    w2 = w + 0.01 * torch.randn(64, 128, generator=g)
    for args in ((w2, mask, packed.clone(), packed_t.clone(), pruned, True), (w2, mask, packed, packed_t, None, False)):
        torch.library.opcheck(co.repack_pair, args)
    co.repack_pair(w2, mask, packed, packed_t, pruned, True)
    x = torch.randn(64, 128, generator=g).to(torch.bfloat16).requires_grad_()
    weight = w2.clone().requires_grad_()
    bias = torch.randn(64, generator=g, requires_grad=True)
    seed = torch.tensor([3], dtype=torch.int64)
    dy = torch.randn(64, 64, generator=g).to(torch.bfloat16)
    for mode, pr_ in (("fst", pruned), ("weight24", None)):
        torch.library.opcheck(co.linear, (x, weight, bias, mask, seed, mode, 1e-2, True, True, packed, packed_t, pr_))
        args = (dy, x.detach(), weight.detach(), mask, seed, mode, 1e-2, True, True, True, True)
        torch.library.opcheck(co.linear_backward, (*args, packed, packed_t, pr_))


def _layer_pair(mode: str, bias: bool = True, dtype=torch.float32):
    torch.manual_seed(7)
    layer = SparseLinear(64, 32, bias=bias, mode=mode, checks=False, seed=11, dtype=dtype, decay=1e-2)
    return layer, copy.deepcopy(layer)


def _fwd_bwd(layer, x, dy):
    x = x.detach().clone().requires_grad_()
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad


@pytest.mark.parametrize("mode", MODES)
def test_compiled_layer_equals_eager(mode):
    eager, compiled_layer = _layer_pair(mode)
    compiled = torch.compile(compiled_layer, backend="aot_eager", fullgraph=True)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):  # the second call draws with the advanced seed on both sides
        x = torch.randn(2, 8, 64, generator=g)
        dy = torch.randn(2, 8, 32, generator=g)
        eager.zero_grad(), compiled_layer.zero_grad()
        want = _fwd_bwd(eager, x, dy)
        got = _fwd_bwd(compiled, x, dy)
        for a, b in zip(got, want, strict=True):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    if mode == "fst":
        assert torch.equal(eager.mvue_seed, compiled_layer.mvue_seed)
        assert int(compiled_layer.mvue_seed) == 13  # two backwards, two draws
    if mode != "dense":
        assert torch.equal(eager.mask, compiled_layer.mask)


def test_compiled_layer_takes_no_draw_without_grad():
    layer, _ = _layer_pair("fst")
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        compiled(torch.randn(4, 64))
    assert int(layer.mvue_seed) == 11


def test_compiled_cslt_path_equals_eager(emulated_cusparselt, monkeypatch):
    """fst and weight24 on the (emulated) cuSPARSELt path: our packer, the 2:4 GEMMs, the fused
    MVUE pack of dY^T; the compiled layer packs per call what the eager one keeps across steps."""
    import kernels.layers.sparse_linear as sl_mod

    monkeypatch.setattr(co, "cslt_mm_packed", sl_mod.cslt_mm_packed)
    for mode in ("fst", "weight24"):
        torch._dynamo.reset()
        torch.manual_seed(3)
        eager = SparseLinear(64, 64, mode=mode, checks=False, seed=5, dtype=torch.bfloat16, decay=1e-2)
        compiled_layer = copy.deepcopy(eager)
        compiled = torch.compile(compiled_layer, backend="aot_eager", fullgraph=True)
        x = torch.randn(64, 64).to(torch.bfloat16)
        dy = torch.randn(64, 64).to(torch.bfloat16)
        want = _fwd_bwd(eager, x, dy)
        got = _fwd_bwd(compiled, x, dy)
        assert (compiled_layer.fallback_reason, eager.fallback_reason) == (None, None)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.float(), b.float(), rtol=1e-2, atol=1e-2)
        if mode == "fst":
            assert torch.equal(eager.mvue_seed, compiled_layer.mvue_seed)


def test_compiled_layer_follows_dense_phase_and_mask_refresh():
    eager, compiled_layer = _layer_pair("fst")
    compiled = torch.compile(compiled_layer, backend="aot_eager", fullgraph=True)
    x = torch.randn(8, 64)
    torch.testing.assert_close(compiled(x), eager(x))
    with torch.no_grad():
        for layer in (eager, compiled_layer):
            layer.weight.mul_(torch.linspace(0.1, 2.0, 64))  # new magnitudes: a new mask
            layer.after_optimizer_step(layer.mask_interval, 1000)  # a refresh step
    assert torch.equal(eager.mask, compiled_layer.mask)
    torch.testing.assert_close(compiled(x), eager(x))
    for layer in (eager, compiled_layer):
        layer.set_dense(True)
    torch.testing.assert_close(compiled(x), F.linear(x, compiled_layer.weight, compiled_layer.bias))


@pytest.mark.parametrize("kind", ["geglu", "swiglu"])
def test_compiled_gated_activation_equals_eager(kind):
    producer = SparseLinear(64, 64, mode="fst", checks=False)
    fn = lambda z: fst_gated(z, producer, kind, "tanh")
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    z = torch.randn(4, 64, requires_grad=True)
    z2 = z.detach().clone().requires_grad_()
    g = torch.randn(4, 32)
    compiled(z).backward(g)
    fn(z2).backward(g)
    torch.testing.assert_close(z.grad, z2.grad, rtol=1e-5, atol=1e-6)


def _after_step(model, step, total):
    for m in model.modules():
        if isinstance(m, SparseLinear):
            m.after_optimizer_step(step, total)


@pytest.mark.parametrize("mode", ["fst", "srste"])
def test_compiled_gpt2_trains_like_eager(mode, plain_torch):
    """Inductor (C++ on the CPU), ``fullgraph=True``: a 2-layer GPT-2 whose FFN is ``mode``, 6
    AdamW steps with a mask refresh every step and, for fst, the dense phase in the last (its
    forward runs dense: asserted): the losses equal the eager model's."""
    torch.manual_seed(0)
    cfg = GPT2Config(d_model=64, n_layer=2, n_head=2, vocab_size=128, vocab_multiple=1, seq_len=16, ffn_mode=mode)
    eager = build_gpt2(cfg)
    for m in eager.modules():
        if isinstance(m, SparseLinear):
            m.checks, m.mask_interval = False, 1
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, fullgraph=True)
    g = torch.Generator().manual_seed(1)
    steps, losses, dense_at = 6, [], []
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (eager, twin)]
    for step in range(1, steps + 1):
        idx = torch.randint(0, 128, (4, 16), generator=g)
        dense_at.append(all(m.is_dense for m in twin.modules() if isinstance(m, SparseLinear)))
        pair = []
        for model, owner, opt in ((eager, eager, opts[0]), (compiled, twin, opts[1])):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                logits = model(idx)
            loss = F.cross_entropy(logits.float().flatten(0, 1)[:, :128], idx.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            _after_step(owner, step, steps)
            pair.append(loss.item())
        losses.append(pair)
    assert dense_at == [False] * (steps - 1) + [mode == "fst"], dense_at  # srste has no dense phase
    for a, b in losses:
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), losses


def _gpu(fn):
    return pytest.mark.gpu(pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")(fn))


@_gpu
@pytest.mark.parametrize("mode", ["fst", "srste", "weight24"])
def test_gpu_compiled_layer_equals_eager_under_autocast(mode):
    """cuSPARSELt path, fp32 master under bf16 autocast, Inductor: output, dX and dW (same MVUE
    draws) of the compiled layer equal the eager layer's within bf16 rounding."""
    torch.manual_seed(22)
    eager = SparseLinear(512, 256, mode=mode, decay=1e-2, checks=False, device="cuda")
    compiled_layer = copy.deepcopy(eager)
    compiled = torch.compile(compiled_layer, fullgraph=True)
    x = torch.randn(4, 128, 512, device="cuda")
    dy = torch.randn(4, 128, 256, device="cuda", dtype=torch.bfloat16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want = _fwd_bwd(eager, x, dy)
        got = _fwd_bwd(compiled, x, dy)
    assert compiled_layer.backend == "cusparselt"
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
    if mode == "fst":
        assert torch.equal(eager.mvue_seed, compiled_layer.mvue_seed)


def _count_pair_refreshes(monkeypatch):
    """Counts of the pair refreshes, (values-only, values and metadata), in the compiled ops and
    in the eager layer (after_optimizer_step's repack)."""
    import kernels.layers.sparse_linear as sl_mod

    counts = {"values": 0, "metadata": 0}
    real = co.refresh_pair_operands

    def counting(w, mask, pair, *, values_only, pruned=None):
        counts["values" if values_only else "metadata"] += 1
        return real(w, mask, pair, values_only=values_only, pruned=pruned)

    monkeypatch.setattr(co, "refresh_pair_operands", counting)
    monkeypatch.setattr(sl_mod, "refresh_pair_operands", counting)
    for name in ("pack_operand", "pack_pair_operands"):  # the compiled path no longer packs per call
        monkeypatch.setattr(co, name, lambda *a, **k: pytest.fail("the compiled layer packed the weight per call"))
    return counts


@pytest.mark.parametrize(
    "mode,autocast,inductor",
    [("fst", False, False), ("fst", True, False), ("weight24", True, False), ("fst", True, True)],
    ids=["fst-bf16", "fst-amp", "weight24-amp", "fst-amp-inductor"],
)
def test_compiled_cslt_path_keeps_the_packed_pair(emulated_cusparselt, monkeypatch, mode, autocast, inductor):
    """The compiled layer keeps the eager layer's packed pair across steps: on a step without a
    mask change it rewrites only the values (no metadata repack, same buffers), after a mask
    refresh (after_optimizer_step, eager) the pair's metadata are repacked in place; outputs and
    gradients equal the eager layer's bit for bit (both decay from the pruned entries where the
    master is float32 under autocast), and the layer is traced twice only (the call that makes
    the pair, the call that reads it)."""
    import kernels.layers.sparse_linear as sl_mod

    monkeypatch.setattr(co, "cslt_mm_packed", sl_mod.cslt_mm_packed)
    torch.manual_seed(3)
    dtype = torch.float32 if autocast else torch.bfloat16
    eager = SparseLinear(64, 128, mode=mode, checks=False, seed=5, dtype=dtype, decay=1e-2, mask_interval=2)
    twin = copy.deepcopy(eager)
    traced = []

    def backend(gm, example_inputs):  # aot_eager or Inductor, counting the graphs traced
        traced.append(gm)
        if inductor:  # Inductor must write the refreshed values into the layer's own buffers
            from torch._inductor.compile_fx import compile_fx

            return compile_fx(gm, example_inputs)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    compiled = torch.compile(twin, backend=backend, fullgraph=True)
    counts = _count_pair_refreshes(monkeypatch)
    g = torch.Generator().manual_seed(4)
    ptrs = None
    for step in range(1, 6):
        x = torch.randn(64, 64, generator=g).to(dtype)
        dy = torch.randn(64, 128, generator=g).to(torch.bfloat16)
        before = dict(counts)
        outs = []
        for layer in (eager, compiled):
            layer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                outs.append(_fwd_bwd(layer, x, dy))
        for a, b in zip(*outs, strict=True):
            assert torch.equal(a, b)
        key = ("cpu", torch.bfloat16)
        assert set(twin._pairs) == {key} and (key in twin._pruned) == autocast
        now = tuple(t.data_ptr() for t in twin._pairs[key])
        assert ptrs is None or now == ptrs  # the same buffers, refreshed in place
        ptrs = now
        # eager and compiled each refreshed the values once (eager's first call packs with
        # pack_pair_operands, not counted, and refreshes the values only to write the pruned
        # entries); only the first compiled call packed the metadata, when it made the pair
        assert counts["values"] - before["values"] == (2 if step > 1 else 1 + autocast)
        assert counts["metadata"] - before["metadata"] == (1 if step == 1 else 0)
        assert torch.equal(eager._pairs[key][0], twin._pairs[key][0])
        assert torch.equal(eager._pairs[key][1], twin._pairs[key][1])
        with torch.no_grad():
            for layer in (eager, twin):  # an optimizer step that moves the mask
                layer.weight.mul_(torch.linspace(2.0, 0.5, 64) if step % 2 else torch.linspace(0.5, 2.0, 64))
        before, old_mask = dict(counts), twin._mask.clone()
        for layer in (eager, twin):
            layer.after_optimizer_step(step, 100)
        refreshed = step % 2 == 0
        assert refreshed == (not torch.equal(old_mask, twin._mask))  # the refresh steps move the mask
        assert counts["metadata"] - before["metadata"] == (2 if refreshed else 0)
        assert torch.equal(eager.mask, twin.mask)
    if mode == "fst":
        assert torch.equal(eager.mvue_seed, twin.mvue_seed)
    assert len(traced) == 2


def test_compiled_forward_repacks_a_stale_mask_in_place(emulated_cusparselt, monkeypatch):
    """A mask made stale outside the graph (reset_parameters, as after new weights) is recomputed
    by the compiled forward, which then repacks the kept pair's metadata in place: same result
    as the eager layer."""
    import kernels.layers.sparse_linear as sl_mod

    monkeypatch.setattr(co, "cslt_mm_packed", sl_mod.cslt_mm_packed)
    torch.manual_seed(5)
    eager = SparseLinear(64, 64, mode="fst", checks=False, seed=5, dtype=torch.bfloat16, decay=1e-2)
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, backend="aot_eager", fullgraph=True)
    x = torch.randn(64, 64).to(torch.bfloat16)
    dy = torch.randn(64, 64).to(torch.bfloat16)
    _fwd_bwd(eager, x, dy), _fwd_bwd(compiled, x, dy)
    counts = _count_pair_refreshes(monkeypatch)
    ptrs = tuple(t.data_ptr() for t in twin._pairs[("cpu", torch.bfloat16)])
    with torch.no_grad():
        for layer in (eager, twin):
            layer.weight.mul_(torch.linspace(0.1, 2.0, 64))
            layer._mask_stale = True
    for layer in (eager, twin):
        layer.zero_grad()
    want, got = _fwd_bwd(eager, x, dy), _fwd_bwd(compiled, x, dy)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(eager.mask, twin.mask)
    assert counts["metadata"] == 2  # eager refresh_mask's repack, the compiled forward's own
    assert tuple(t.data_ptr() for t in twin._pairs[("cpu", torch.bfloat16)]) == ptrs


@pytest.mark.parametrize("kind", ["gelu", "geglu"])
def test_compiled_fst_act_fuses_the_pack_like_the_eager_hand_off(emulated_cusparselt, monkeypatch, kind):
    """fc (fst, MVUE, emulated cuSPARSELt, bf16) then the activation: compiled, ``fst_act`` runs
    fc and the activation as ``linear_act``, whose backward computes dZ and the packed MVUE(dZ^T)
    in one kernel (called once here) and dW from it; dX, dW, db and the seed equal the eager
    layers' (whose hand-off fuses the same way)."""
    import kernels.layers.sparse_activation as sa_mod
    import kernels.layers.sparse_linear as sl_mod
    from kernels.layers.sparse_activation import fst_act

    monkeypatch.setattr(co, "cslt_mm_packed", sl_mod.cslt_mm_packed)
    monkeypatch.setattr(co, "layout_matches", lambda device, dtype: True)
    monkeypatch.setattr(sa_mod, "layout_matches", lambda device, dtype: True)
    name = "cslt_gelu_backward_mvue_pack_t" if kind == "gelu" else "cslt_gated_backward_mvue_pack_t"
    calls = []
    real = getattr(co, name)
    monkeypatch.setattr(co, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(3)
    eager = SparseLinear(64, 256, mode="fst", checks=False, seed=5, dtype=torch.bfloat16, decay=1e-2)
    twin = copy.deepcopy(eager)
    compiled = torch.compile(lambda x: fst_act(twin, x, kind, "tanh"), backend="aot_eager", fullgraph=True)
    x = torch.randn(64, 64).to(torch.bfloat16)
    g = torch.randn(64, 256 if kind == "gelu" else 128).to(torch.bfloat16)
    got, want = [], []
    for fn, layer, out in ((compiled, twin, got), (lambda x: fst_act(eager, x, kind, "tanh"), eager, want)):
        xi = x.clone().requires_grad_()
        a = fn(xi)
        a.backward(g)
        out += [a.detach().float(), xi.grad.float(), layer.weight.grad.float(), layer.bias.grad.float()]
    assert calls == [1], "the compiled backward did not run the fused activation backward + pack"
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)
    assert torch.equal(eager.mvue_seed, twin.mvue_seed)


@_gpu
@pytest.mark.parametrize("kind", ["gelu", "geglu"])
def test_gpu_compiled_fst_act_equals_eager_under_autocast(monkeypatch, kind):
    """cuSPARSELt, fp32 master under bf16 autocast, Inductor: ``fst_act`` compiled (one
    ``linear_act`` op, the fused activation backward + pack, called once) gives the eager hand-off's
    activation, dX, dW and db within bf16 rounding, with the same MVUE draws."""
    from kernels.layers.sparse_activation import fst_act

    name = "cslt_gelu_backward_mvue_pack_t" if kind == "gelu" else "cslt_gated_backward_mvue_pack_t"
    calls = []
    real = getattr(co, name)
    monkeypatch.setattr(co, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(23)
    eager = SparseLinear(512, 1024, mode="fst", decay=1e-2, checks=False, device="cuda")
    twin = copy.deepcopy(eager)
    compiled = torch.compile(lambda x: fst_act(twin, x, kind, "tanh"), fullgraph=True)
    x = torch.randn(4, 128, 512, device="cuda")
    g = torch.randn(4, 128, 1024 if kind == "gelu" else 512, device="cuda", dtype=torch.bfloat16)
    got, want = [], []
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for fn, layer, out in ((compiled, twin, got), (lambda x: fst_act(eager, x, kind, "tanh"), eager, want)):
            xi = x.clone().requires_grad_()
            a = fn(xi)
            a.backward(g)
            out += [a.detach().float(), xi.grad.float(), layer.weight.grad.float(), layer.bias.grad.float()]
    assert calls == [1] and twin.backend == "cusparselt"
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)
    assert torch.equal(eager.mvue_seed, twin.mvue_seed)


@pytest.mark.parametrize("kind", ["gelu", "swiglu"])
def test_compiled_fst_act_in_the_dense_phase_and_without_mvue(kind):
    """Where ``linear_act`` does not apply (the dense phase; fst without MVUE), ``fst_act``
    compiled is the layer, then the activation: equal to the eager layers."""
    from kernels.layers.sparse_activation import fst_act

    torch.manual_seed(4)
    for setup in ("dense_phase", "no_mvue"):
        torch._dynamo.reset()
        fc = SparseLinear(64, 128, mode="fst", checks=False, mvue=setup != "no_mvue")
        if setup == "dense_phase":
            fc.set_dense(True)
        x = torch.randn(8, 64)
        compiled = torch.compile(lambda x, fc=fc: fst_act(fc, x, kind, "tanh"), backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(x), fst_act(fc, x, kind, "tanh"), rtol=1e-5, atol=1e-6)
