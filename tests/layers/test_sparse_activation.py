"""kernels.layers.sparse_activation: ``fst_gelu`` is GELU everywhere; behind an fst layer on the
(emulated, here) cuSPARSELt path its backward hands the layer MVUE(dH^T) packed in the same pass,
the layer uses it, and gradients equal those of plain GELU with separate packing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kernels.layers.sparse_activation as sa_mod
import kernels.layers.sparse_linear as sl_mod
import kernels.ops.cslt_pack as cp_mod
from kernels import SparseLinear
from kernels.layers.sparse_activation import fst_gated, fst_gelu
from kernels.layers.sparse_linear import GradHandoff, _Plan
from kernels.ops.geglu import geglu, swiglu
from tests.helpers import rel_err

CUDA = torch.cuda.is_available()


def test_plain_gelu_for_other_producers():
    """nn.Linear, a dense or CPU-fallback SparseLinear, no_grad: F.gelu itself (same values,
    torch's own backward node)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g)
    for layer in (nn.Linear(16, 32), SparseLinear(16, 32, mode="dense"), SparseLinear(16, 32, mode="fst")):
        with pytest.warns(UserWarning) if layer.__class__ is SparseLinear and layer.mode == "fst" else _nothing():
            z = layer(x)
        a = fst_gelu(z, layer, "tanh")
        assert torch.equal(a, F.gelu(z, approximate="tanh"))
        assert "Gelu" in type(a.grad_fn).__name__
    with pytest.raises(ValueError, match="approximate"):
        fst_gelu(z, layer, "erf")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _handoff(seed: int = 3) -> GradHandoff:
    plan = _Plan("fst", 0.0, cslt=True, checks=False, device_type="cpu", col_out=True)
    return GradHandoff(plan, torch.tensor([seed], dtype=torch.int64))


def _assert_offers_pack_of(handoff: GradHandoff, dz2d: torch.Tensor, layer_seed: int, seed: int) -> None:
    """The handoff carries the layer's seed and offers exactly cslt_pack_mvue_t(dz2d) with ``seed``."""
    assert int(handoff.layer_seed) == layer_seed
    packed = handoff.take(dz2d)
    assert packed is not None
    expect = cp_mod.cslt_pack_mvue_t(dz2d, torch.tensor([seed]))
    assert torch.equal(packed.view(torch.int16), expect.view(torch.int16))


def test_handoff_gives_the_operand_only_for_the_tensor_it_was_made_from():
    h = _handoff()
    assert h.wants_packed_grad
    dy = torch.randn(64, 32)
    packed = torch.randn(4)
    h.offer(dy, packed)
    assert h.take(dy.clone()) is None  # another tensor; and the offer is forgotten
    assert h.take(dy) is None
    h.offer(dy, packed)
    assert h.take(dy.view(64, 32)) is packed  # a view of the same storage and shape
    h.offer(dy, packed)
    dy.add_(1)  # modified in place after the offer
    assert h.take(dy) is None
    for plan in (
        _Plan("weight24", 0.0, True, False, "cpu"),
        _Plan("fst", 0.0, False, False, "cpu"),
        _Plan("fst", 0.0, True, True, "cpu"),
    ):
        assert not GradHandoff(plan, torch.tensor([1])).wants_packed_grad


class _Producer:
    def __init__(self, handoff: GradHandoff) -> None:
        self.grad_handoff = handoff


@pytest.mark.parametrize("layout", ["col", "row"])
def test_backward_packs_and_offers(layout, monkeypatch):
    """The fused backward (kernel through the interpreter): dZ equals GELU's backward within
    bf16 rounding; the offered operand is cslt_pack_mvue_t of that very dZ, with the layer's seed,
    which advances by one."""
    monkeypatch.setattr(sa_mod, "layout_matches", lambda device, dtype: True)
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(2, 64, 96, generator=gen).bfloat16()
    g = torch.randn(2, 64, 96, generator=gen).bfloat16()
    if layout == "col":  # [B, S, n] over a contiguous [n, B*S] buffer, as the fst fc writes it
        z = z.reshape(128, 96).t().contiguous().t().reshape(2, 64, 96)
        g = g.reshape(128, 96).t().contiguous().t().reshape(2, 64, 96)
    z.requires_grad_(True)
    handoff = _handoff(seed=11)
    a = fst_gelu(z, _Producer(handoff), "tanh")
    assert torch.equal(a, F.gelu(z.detach(), approximate="tanh"))
    (dz,) = torch.autograd.grad(a, z, g)
    ref = torch.ops.aten.gelu_backward(g.double(), z.detach().double(), approximate="tanh")
    assert rel_err(dz, ref) < 5e-3 and dz.stride() == z.stride()
    _assert_offers_pack_of(handoff, dz.reshape(128, 96), layer_seed=12, seed=11)


def test_mismatched_gradient_layout_falls_back(monkeypatch):
    monkeypatch.setattr(sa_mod, "layout_matches", lambda device, dtype: True)
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(128, 96, generator=gen).bfloat16().t().contiguous().t().requires_grad_(True)
    g = torch.randn(128, 96, generator=gen).bfloat16()  # row-major: not z's layout
    handoff = _handoff()
    (dz,) = torch.autograd.grad(fst_gelu(z, _Producer(handoff), "none"), z, g)
    assert torch.equal(dz, torch.ops.aten.gelu_backward(g, z.detach(), approximate="none"))
    assert int(handoff.layer_seed) == 3 and handoff.take(dz) is None


def _ffn_grads(act, x: torch.Tensor, dy: torch.Tensor, cuda: bool = False, gated: bool = False) -> dict:
    """fc (fst, column-major output; [gate, up] of twice the width when ``gated``) -> act -> proj,
    fwd + bwd; returns outputs, gradients, dZ (the gradient fc's backward receives) and the
    number of MVUE packs the layers ran."""
    torch.manual_seed(2)
    kw = {} if cuda else {"dtype": torch.bfloat16}
    fc_out = (8 if gated else 4) * x.shape[-1]
    fc = SparseLinear(x.shape[-1], fc_out, mode="fst", checks=False, seed=7, output_layout="col", **kw)
    proj = SparseLinear(4 * x.shape[-1], x.shape[-1], mode="fst", checks=False, seed=9, **kw)
    if cuda:
        fc, proj = fc.cuda(), proj.cuda()
    calls = []
    real = sl_mod.pack_mvue_t_operand
    sl_mod.pack_mvue_t_operand = lambda t, s: calls.append(t.shape) or real(t, s)
    try:
        xg = x.clone().requires_grad_(True)
        with torch.autocast("cuda", torch.bfloat16, enabled=cuda):
            z = fc(xg)
            dz = []
            z.register_hook(dz.append)
            y = proj(act(z, fc))
        y.backward(dy)
    finally:
        sl_mod.pack_mvue_t_operand = real
    assert int(fc.mvue_seed) == 8 and int(proj.mvue_seed) == 10
    return {
        "y": y,
        "dx": xg.grad,
        "fc.b": fc.bias.grad,
        "proj.w": proj.weight.grad,
        "fc.w": fc.weight.grad,
        "dz": dz[0],
        "packs": len(calls),
    }


def _fused(z: torch.Tensor, fc: nn.Module) -> torch.Tensor:
    return fst_gelu(z, fc, "tanh")


def _plain(z: torch.Tensor, fc: nn.Module) -> torch.Tensor:
    return F.gelu(z, approximate="tanh")


def _check_fused_against_plain(fused: dict, plain: dict, x: torch.Tensor) -> None:
    """Same draws (seeds) in both runs; everything upstream of dZ is identical, dZ differs by
    rounding of the GELU backward only, so fc's weight gradient is checked against MVUE(dZ^T) of
    the fused run's own dZ, packed separately, times X."""
    assert (fused["packs"], plain["packs"]) == (1, 2)  # fc took the handed operand; proj packed its own
    assert torch.equal(fused["y"], plain["y"]) and torch.equal(fused["proj.w"], plain["proj.w"])
    for k in ("dx", "fc.b", "dz"):
        assert rel_err(fused[k], plain[k]) < 1e-2, k
    dz2 = fused["dz"].reshape(-1, fused["dz"].shape[-1])
    op = cp_mod.cslt_pack_mvue_t(dz2, torch.tensor([7], device=dz2.device))
    g = cp_mod.cslt_unpack_reference(op.cpu(), dz2.shape[1], dz2.shape[0]).double()
    assert rel_err(fused["fc.w"].cpu(), g @ x.reshape(-1, x.shape[-1]).double().cpu()) < 1e-2


def test_fst_ffn_uses_the_handoff_and_matches_separate_packing(emulated_cusparselt, monkeypatch):
    """Through the fst FFN (emulated cuSPARSELt): with fst_gelu, fc's backward takes the handed
    operand (one MVUE pack in the layers' backwards instead of two), and the gradients equal those
    of F.gelu with separate packing."""
    monkeypatch.setattr(sa_mod, "layout_matches", lambda device, dtype: True)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 64, 64, generator=gen).bfloat16()
    dy = torch.randn(2, 64, 64, generator=gen).bfloat16()
    _check_fused_against_plain(_ffn_grads(_fused, x, dy), _ffn_grads(_plain, x, dy), x)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_gpu_fst_ffn_fused_matches_separate_packing():
    """The same on cuSPARSELt, under bf16 autocast."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(4, 256, 512, device="cuda", generator=gen).bfloat16()
    dy = torch.randn(4, 256, 512, device="cuda", generator=gen).bfloat16()
    fused, plain = _ffn_grads(_fused, x, dy, cuda=True), _ffn_grads(_plain, x, dy, cuda=True)
    _check_fused_against_plain(fused, plain, x)


# ------------------------------------------------------------------------------------------------
# fst_gated: GEGLU / SwiGLU on fc's fused [gate, up] output
# ------------------------------------------------------------------------------------------------


def test_gated_plain_for_other_producers():
    """nn.Linear, a dense or CPU-fallback SparseLinear, no_grad: kernels.ops.geglu's geglu / swiglu
    (same values and gradients); bad kind or approximation: ValueError."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(8, 16, generator=gen, requires_grad=True)
    for layer in (nn.Linear(16, 64), SparseLinear(16, 64, mode="dense")):
        for kind, ref in (("geglu", lambda t: geglu(t, "tanh")), ("swiglu", swiglu)):
            z = layer(x)
            a = fst_gated(z, layer, kind, "tanh")
            assert torch.equal(a, ref(z))
            g = torch.randn_like(a)
            expect = torch.autograd.grad(ref(z), x, g, retain_graph=True)[0]
            assert torch.equal(torch.autograd.grad(a, x, g)[0], expect)
    with pytest.raises(ValueError, match="kind"):
        fst_gated(z, layer, "reglu")
    with pytest.raises(ValueError, match="approximate"):
        fst_gated(z, layer, "geglu", "erf")


@pytest.mark.parametrize("layout", ["col", "row", "row_grad"])
@pytest.mark.parametrize("kind", ["geglu", "swiglu"])
def test_gated_backward_packs_and_offers(layout, kind, monkeypatch):
    """The fused gated backward (kernel through the interpreter), [B, S, 2r] input: the output is
    geglu / swiglu; dZ equals their backward within bf16 rounding, in z's layout; the offered
    operand is cslt_pack_mvue_t of that very dZ with the layer's seed, which advances by one. A
    gradient in the other layout (``row_grad``: z column-major, g row-major) is brought to z's
    layout first, as kernels.ops.geglu's backward does, and still fused."""
    monkeypatch.setattr(sa_mod, "layout_matches", lambda device, dtype: True)
    gen = torch.Generator().manual_seed(9)
    z = torch.randn(2, 64, 256, generator=gen).bfloat16()
    g = torch.randn(2, 64, 128, generator=gen).bfloat16()
    if layout in ("col", "row_grad"):  # over a contiguous [2r, B*S] buffer, as the fst fc writes it
        z = z.reshape(128, 256).t().contiguous().t().reshape(2, 64, 256)
    if layout == "col":
        g = g.reshape(128, 128).t().contiguous().t().reshape(2, 64, 128)
    z.requires_grad_(True)
    handoff = _handoff(seed=21)
    a = fst_gated(z, _Producer(handoff), kind, "tanh")
    plain = geglu(z.detach(), "tanh") if kind == "geglu" else swiglu(z.detach())
    assert torch.equal(a, plain)
    (dz,) = torch.autograd.grad(a, z, g)
    ref = cp_mod.gated_backward_reference(z.detach().double(), g.double(), kind, "tanh")
    assert rel_err(dz, ref) < 5e-3 and dz.stride() == z.stride() and dz.shape == z.shape
    _assert_offers_pack_of(handoff, dz.reshape(128, 256), layer_seed=22, seed=21)


def test_gated_unfusable_shape_falls_back(monkeypatch):
    """r % 64 != 0: kernels.ops.geglu's own backward, no pack drawn, nothing offered."""
    monkeypatch.setattr(sa_mod, "layout_matches", lambda device, dtype: True)
    gen = torch.Generator().manual_seed(10)
    z = torch.randn(128, 192, generator=gen).bfloat16().requires_grad_(True)
    g = torch.randn(128, 96, generator=gen).bfloat16()
    handoff = _handoff()
    (dz,) = torch.autograd.grad(fst_gated(z, _Producer(handoff), "swiglu"), z, g)
    (expect,) = torch.autograd.grad(swiglu(z), z, g)
    assert torch.equal(dz, expect)
    assert int(handoff.layer_seed) == 3 and handoff.take(dz) is None


def _geglu_fused(z: torch.Tensor, fc: nn.Module) -> torch.Tensor:
    return fst_gated(z, fc, "geglu", "tanh")


def _geglu_plain(z: torch.Tensor, fc: nn.Module) -> torch.Tensor:
    return geglu(z, "tanh", check_finite=False)


def test_fst_gated_ffn_uses_the_handoff_and_matches_separate_packing(emulated_cusparselt, monkeypatch):
    """Through a GEGLU fst FFN (emulated cuSPARSELt): with fst_gated, fc's backward takes the
    handed operand, and the gradients equal those of kernels.ops.geglu with separate packing."""
    monkeypatch.setattr(sa_mod, "layout_matches", lambda device, dtype: True)
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(2, 64, 64, generator=gen).bfloat16()
    dy = torch.randn(2, 64, 64, generator=gen).bfloat16()
    fused = _ffn_grads(_geglu_fused, x, dy, gated=True)
    _check_fused_against_plain(fused, _ffn_grads(_geglu_plain, x, dy, gated=True), x)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_gpu_fst_gated_ffn_fused_matches_separate_packing():
    """The same on cuSPARSELt, under bf16 autocast."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(4, 256, 512, device="cuda", generator=gen).bfloat16()
    dy = torch.randn(4, 256, 512, device="cuda", generator=gen).bfloat16()
    fused = _ffn_grads(_geglu_fused, x, dy, cuda=True, gated=True)
    _check_fused_against_plain(fused, _ffn_grads(_geglu_plain, x, dy, cuda=True, gated=True), x)
