"""kernels.ops.cslt_pack, the activation backward fused with the MVUE pack: GELU (tanh and exact)
and GEGLU / SwiGLU backward passes equal the separate passes, the tanh-GELU derivative over the
whole range, the plain-PyTorch gated backward, bad input, and the self test catching a wrong fused
kernel."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import rel_err
from tests.kernels.cslt_pack_helpers import DTYPES, bits, gated_reference64


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_backward_mvue_pack_matches_separate_passes(dname, layout, approximate):
    """One pass (GELU backward, stored, then MVUE of its transpose, packed) == the GELU backward
    (within one ulp of a float64 reference, plus fp32 cancellation) followed by ``cslt_pack_mvue_t`` of what was stored,
    bit for bit; dh keeps h's layout; the seed advances by one, as with the separate pack."""
    from kernels.ops.cslt_pack import cslt_gelu_backward_mvue_pack_t, cslt_pack_mvue_t

    dt = DTYPES[dname]
    t, n = 128, 96
    gen = torch.Generator().manual_seed(31)
    h, g = (torch.randn(t, n, generator=gen).mul(2).to(dt) for _ in range(2))
    g[:4, :8] = 0  # groups with zero gradient (degenerate MVUE groups)
    if layout == "col":
        h, g = h.t().contiguous().t(), g.t().contiguous().t()
    seed, seed_ref = torch.tensor([77]), torch.tensor([77])
    dh, packed = cslt_gelu_backward_mvue_pack_t(h, g, seed, approximate)
    assert dh.stride() == h.stride() and dh.dtype == dt and int(seed) == 78
    ref = torch.ops.aten.gelu_backward(g.double(), h.double(), approximate=approximate)
    # one ulp, plus the fp32 cancellation of 1 + tanh far left (torch's fp32 backward has it too)
    fi = torch.finfo(dt)
    tol = fi.eps * ref.abs().clamp_min(fi.tiny) + 1e-5 * g.double().abs()
    assert torch.isfinite(dh).all() and ((dh.double() - ref).abs() <= tol).all()
    assert rel_err(dh, ref) < (4e-3 if dt == torch.bfloat16 else 5e-4)
    assert torch.equal(bits(packed), bits(cslt_pack_mvue_t(dh, seed_ref)))
    again = cslt_gelu_backward_mvue_pack_t(h, g, seed, approximate)[1]  # draws afresh
    assert not torch.equal(bits(again), bits(packed))


def test_gelu_tanh_derivative_over_the_whole_range():
    """The fused pass's tanh-GELU derivative (one exp2, one division) against the exact value
    (float64 from sigmoids, no cancellation: torch's float64 tanh form loses 1 + tanh far left)
    to one ulp of the 16-bit dtype, from x = -30 to 30 and at huge |x| (gelu' = 1 or 0); +-inf and
    NaN inputs give NaN, as torch's backward does."""
    from kernels.ops.common import use_triton
    from kernels.ops.cslt_pack import cslt_gelu_backward_mvue_pack_t

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    xs = torch.cat([torch.linspace(-30, 30, 64 * 32 - 8), torch.tensor([1e4, -1e4, 1e13, -1e13])])
    xs = torch.cat([xs, torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0])])
    h = xs.to(torch.bfloat16).reshape(64, 32).to(dev)
    if not use_triton(h):
        pytest.skip("the Triton kernel does not run here (the fallback is torch's backward)")
    g = torch.ones_like(h)
    dh = cslt_gelu_backward_mvue_pack_t(h, g, torch.tensor([5], device=dev), "tanh")[0].double().cpu()
    x = h.double().cpu()
    y = (2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)
    p, q = torch.sigmoid(2 * y), torch.sigmoid(-2 * y)
    exact = p * (1 + q * x * (2 * (2 / torch.pi) ** 0.5) * (1 + 3 * 0.044715 * x * x))
    fin = torch.isfinite(x)
    exact[fin & (x.abs() > 1e3)] = (x[fin & (x.abs() > 1e3)] > 0).double()  # sigmoid's 0 * inf
    # one ulp, and an absolute 1e-35: on the GPU, intermediates below fp32's normal range (x near
    # -10, where gelu' ~ 1e-37) flush to zero
    tol = torch.finfo(torch.bfloat16).eps * exact.abs() + 1e-35
    assert ((dh - exact).abs() <= tol)[fin].all()
    assert torch.isnan(dh[~fin]).all()


def test_gelu_backward_mvue_pack_bad_input():
    from kernels.ops.cslt_pack import cslt_gelu_backward_mvue_pack_t

    h = torch.randn(128, 64).to(torch.bfloat16)
    seed = torch.tensor([1])
    with pytest.raises(ValueError, match="approximate"):
        cslt_gelu_backward_mvue_pack_t(h, h.clone(), seed, "erf")
    with pytest.raises(TypeError):
        cslt_gelu_backward_mvue_pack_t(h, h.half(), seed)
    with pytest.raises(TypeError):
        cslt_gelu_backward_mvue_pack_t(h.float(), h.float(), seed)
    with pytest.raises(ValueError, match="shape"):
        cslt_gelu_backward_mvue_pack_t(h, h[:64].clone(), seed)
    with pytest.raises(ValueError, match="layout"):
        cslt_gelu_backward_mvue_pack_t(h, h.t().contiguous().t(), seed)
    with pytest.raises(ValueError, match="layout"):
        cslt_gelu_backward_mvue_pack_t(h[:, ::2], h[:, ::2], seed)
    with pytest.raises(ValueError, match="T % 64"):
        cslt_gelu_backward_mvue_pack_t(h[:32], h[:32], seed)
    with pytest.raises(TypeError, match="seed_tensor"):
        cslt_gelu_backward_mvue_pack_t(h, h.clone(), torch.tensor([1], dtype=torch.int32))


def test_self_test_catches_a_wrong_fused_gelu_pack():
    import kernels.ops.cslt_pack as cp

    g = torch.Generator().manual_seed(0)
    real = cp.cslt_gelu_backward_mvue_pack_t
    try:
        cp.cslt_gelu_backward_mvue_pack_t = lambda h, gr, s, a="tanh": (lambda r: (r[0], r[1].neg()))(real(h, gr, s, a))  # noqa: E731
        assert not cp._self_test_paths(torch.device("cpu"), torch.bfloat16, g)
    finally:
        cp.cslt_gelu_backward_mvue_pack_t = real


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("kind", ["geglu", "swiglu"])
def test_gated_backward_mvue_pack_matches_separate_passes(dname, layout, kind):
    """One pass (GEGLU / SwiGLU backward, stored, then MVUE of its transpose, packed) == the gated
    backward (within one ulp of a float64 reference) followed by ``cslt_pack_mvue_t`` of what was
    stored, bit for bit; dz keeps z's layout, dz is written everywhere (poisoned buffer check via
    NaN-free output), and the seed advances by one."""
    from kernels.ops.cslt_pack import cslt_gated_backward_mvue_pack_t, cslt_pack_mvue_t

    dt = DTYPES[dname]
    t, r = 128, 128
    gen = torch.Generator().manual_seed(37)
    z = torch.randn(t, 2 * r, generator=gen).mul(2).to(dt)
    g = torch.randn(t, r, generator=gen).to(dt)
    g[:4, :8] = 0  # groups with zero gradient (degenerate MVUE groups), in both halves
    if layout == "col":
        z, g = z.t().contiguous().t(), g.t().contiguous().t()
    seed, seed_ref = torch.tensor([91]), torch.tensor([91])
    dz, packed = cslt_gated_backward_mvue_pack_t(z, g, seed, kind)
    assert dz.stride() == z.stride() and dz.dtype == dt and int(seed) == 92
    ref, tol = gated_reference64(z, g, kind)
    assert torch.isfinite(dz).all() and ((dz.double() - ref).abs() <= tol).all()
    assert rel_err(dz, ref) < (4e-3 if dt == torch.bfloat16 else 5e-4)
    assert torch.equal(bits(packed), bits(cslt_pack_mvue_t(dz, seed_ref)))
    again = cslt_gated_backward_mvue_pack_t(z, g, seed, kind)[1]  # draws afresh
    assert not torch.equal(bits(again), bits(packed))


def test_gated_backward_reference_matches_autograd():
    """The plain-PyTorch gated backward == autograd through geglu_reference / swiglu_reference."""
    from kernels.ops.cslt_pack import gated_backward_reference
    from kernels.ops.geglu import geglu_reference, swiglu_reference

    gen = torch.Generator().manual_seed(3)
    z = torch.randn(16, 64, generator=gen, requires_grad=True)
    g = torch.randn(16, 32, generator=gen)
    for kind, fn in (("geglu", lambda t: geglu_reference(t, "tanh")), ("swiglu", swiglu_reference)):
        (expect,) = torch.autograd.grad(fn(z), z, g)
        assert rel_err(gated_backward_reference(z.detach(), g, kind, "tanh"), expect) < 1e-6


def test_gated_backward_mvue_pack_bad_input():
    from kernels.ops.cslt_pack import cslt_gated_backward_mvue_pack_t

    z = torch.randn(128, 256).to(torch.bfloat16)
    g = torch.randn(128, 128).to(torch.bfloat16)
    seed = torch.tensor([1])
    with pytest.raises(ValueError, match="kind"):
        cslt_gated_backward_mvue_pack_t(z, g, seed, "reglu")
    with pytest.raises(ValueError, match="approximate"):
        cslt_gated_backward_mvue_pack_t(z, g, seed, "geglu", "erf")
    with pytest.raises(TypeError):
        cslt_gated_backward_mvue_pack_t(z, g.half(), seed)
    with pytest.raises(TypeError):
        cslt_gated_backward_mvue_pack_t(z.float(), g.float(), seed)
    with pytest.raises(ValueError, match="shape"):
        cslt_gated_backward_mvue_pack_t(z, z.clone(), seed)
    with pytest.raises(ValueError, match="column-major"):
        cslt_gated_backward_mvue_pack_t(z, g.t().contiguous().t(), seed)
    with pytest.raises(ValueError, match="T % 64"):
        cslt_gated_backward_mvue_pack_t(z[:32], g[:32], seed)
    with pytest.raises(ValueError, match="r % 64"):
        cslt_gated_backward_mvue_pack_t(z[:, :192].contiguous(), g[:, :96].contiguous(), seed)
    with pytest.raises(TypeError, match="seed_tensor"):
        cslt_gated_backward_mvue_pack_t(z, g, torch.tensor([1], dtype=torch.int32))


def test_self_test_catches_a_wrong_fused_gated_pack():
    import kernels.ops.cslt_pack as cp

    g = torch.Generator().manual_seed(0)
    real = cp.cslt_gated_backward_mvue_pack_t

    def wrong(z, dout, s, kind="geglu", approximate="tanh"):
        dz, packed = real(z, dout, s, kind, approximate)
        return dz, packed.neg()

    try:
        cp.cslt_gated_backward_mvue_pack_t = wrong
        assert not cp._self_test_paths(torch.device("cpu"), torch.bfloat16, g)
    finally:
        cp.cslt_gated_backward_mvue_pack_t = real
