"""Masked decay on gradients (g += alpha * w * ~m): fused Triton kernel vs reference, in-place
semantics, kept positions untouched, every bad-input error."""

from __future__ import annotations

import pytest
import torch

import kernels.ops.masked_decay as md_mod
from kernels.ops.masked_decay import masked_decay_, masked_decay_bytes, masked_decay_reference
from tests.helpers import rel_err

TOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _inputs(shape, dtype, seed, p_keep=0.5):
    g = torch.Generator().manual_seed(seed)
    grad = (torch.randn(shape, generator=g) * 1e-2).to(dtype)
    weight = torch.randn(shape, generator=g).to(dtype)
    mask = torch.rand(shape, generator=g) < p_keep
    return grad, weight, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(64, 48), (3, 5, 7), (3000,)])
def test_kernel_matches_reference(dtype, shape):
    for seed, alpha in ((0, 2e-4), (1, 0.37), (2, -1.5)):
        grad, weight, mask = _inputs(shape, dtype, seed)
        before = grad.clone()
        ref = masked_decay_reference(grad, weight, mask, alpha)
        assert torch.equal(grad, before)  # the reference does not touch its input
        out = masked_decay_(grad, weight, mask, alpha)
        assert out is grad and out.dtype == dtype and out.shape == grad.shape
        assert rel_err(out, ref) <= TOL[dtype]
        # the decay itself (not only the large-looking total) is right
        assert rel_err(out.float() - before.float(), ref.float() - before.float()) <= 10 * TOL[dtype]
        # kept positions untouched bit for bit, decayed ones changed
        assert torch.equal(out[mask], before[mask])
        assert not torch.equal(out[~mask], before[~mask])


def test_decay_formula_against_float64():
    grad, weight, mask = _inputs((33, 31), torch.float32, seed=5)
    expect = grad.double() + 0.01 * weight.double() * (~mask).double()
    out = masked_decay_(grad.clone(), weight, mask, 0.01)
    assert rel_err(out, expect) <= 1e-6
    assert rel_err(masked_decay_reference(grad, weight, mask, 0.01), expect) <= 1e-6


def test_in_place_same_storage():
    grad, weight, mask = _inputs((16, 16), torch.float32, seed=1)
    ptr = grad.data_ptr()
    version = grad._version
    out = masked_decay_(grad, weight, mask, 0.5)
    assert out is grad and grad.data_ptr() == ptr
    assert grad._version > version


def test_alpha_zero_and_all_kept_leave_grad_unchanged():
    grad, weight, mask = _inputs((20, 12), torch.bfloat16, seed=2)
    before = grad.clone()
    masked_decay_(grad, weight, mask, 0.0)
    assert torch.equal(grad, before)
    masked_decay_(grad, weight, torch.ones_like(mask), 3.0)
    assert torch.equal(grad, before)
    masked_decay_(grad, weight, torch.zeros_like(mask), 1.0)
    assert rel_err(grad, before.float() + weight.float()) <= TOL[torch.bfloat16]


def test_strided_weight_and_mask_ok():
    grad, weight, mask = _inputs((24, 40), torch.float16, seed=3)
    w_t = weight.t().contiguous().t()
    m_t = mask.t().contiguous().t()
    assert not w_t.is_contiguous() and not m_t.is_contiguous()
    ref = masked_decay_reference(grad, weight, mask, 0.1)
    out = masked_decay_(grad.clone(), w_t, m_t, 0.1)
    assert rel_err(out, ref) <= TOL[torch.float16]


def test_poisoned_tail_untouched():
    """The kernel writes only within grad: a NaN tail right after grad's storage stays NaN."""
    n = 3000
    buf = torch.full((n + 64,), float("nan"))
    grad = buf[:n]
    grad.copy_(torch.randn(n))
    weight = torch.randn(n)
    mask = torch.rand(n) < 0.5
    ref = masked_decay_reference(grad, weight, mask, 0.2)
    masked_decay_(grad, weight, mask, 0.2)
    assert torch.isnan(buf[n:]).all()
    assert torch.equal(grad, ref)


def test_empty_and_int_alpha():
    g = torch.empty(0, 4)
    assert masked_decay_(g, torch.empty(0, 4), torch.empty(0, 4, dtype=torch.bool), 1.0) is g
    grad, weight, mask = _inputs((8, 8), torch.float32, seed=4)
    ref = masked_decay_reference(grad, weight, mask, 1.0)
    assert torch.equal(masked_decay_(grad, weight, mask, 1), ref)


def test_plain_pytorch_path(monkeypatch):
    monkeypatch.setattr(md_mod, "use_triton", lambda t: False)
    grad, weight, mask = _inputs((8, 12), torch.float16, seed=6)
    ref = masked_decay_reference(grad, weight, mask, 0.3)
    ptr = grad.data_ptr()
    out = masked_decay_(grad, weight, mask, 0.3)
    assert out is grad and grad.data_ptr() == ptr and torch.equal(out, ref)


def test_bytes():
    grad, weight, mask = _inputs((4, 8), torch.bfloat16, seed=0)
    assert masked_decay_bytes(grad, weight, mask) == 32 * (2 * 2 + 2 + 1)
    assert masked_decay_bytes(grad.float()) == 32 * (2 * 4 + 4 + 1)


# --------------------------------------------------------------------------------------------
# bad inputs: every check, and grad is left untouched when one fires
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [masked_decay_, masked_decay_reference])
def test_bad_inputs(fn):
    grad, weight, mask = _inputs((8, 8), torch.float32, seed=9)
    before = grad.clone()

    def expect(exc, match, g=grad, w=weight, m=mask, a=0.1):
        with pytest.raises(exc, match=match):
            fn(g, w, m, a)

    expect(ValueError, "one shape", w=weight[:, :4])
    expect(ValueError, "one shape", m=mask[:4])
    expect(TypeError, "mask has dtype", m=mask.to(torch.uint8))
    expect(TypeError, "mask has dtype", m=mask.float())
    expect(TypeError, "grad has dtype", g=grad.double())
    expect(TypeError, "grad has dtype", g=grad.to(torch.int32))
    expect(TypeError, "weight has dtype", w=weight.half())
    expect(TypeError, "weight has dtype", w=weight.double())
    expect(TypeError, "torch.Tensor", g=grad.tolist())
    expect(TypeError, "torch.Tensor", m=None)
    expect(ValueError, "finite", a=float("nan"))
    expect(ValueError, "finite", a=float("inf"))
    expect(TypeError, "alpha", a=torch.tensor(0.1))
    expect(TypeError, "alpha", a="0.1")
    expect(TypeError, "alpha", a=True)
    for bad in (float("nan"), float("inf")):
        w = weight.clone()
        w[3, 5] = bad
        expect(ValueError, "weight contains NaN or Inf", w=w)
        g = grad.clone()
        g[0, 0] = bad
        expect(ValueError, "grad contains NaN or Inf", g=g)
    # the decayed value could overflow the dtype
    expect(ValueError, "exceeds", g=grad.half(), w=torch.full((8, 8), 60000.0, dtype=torch.float16), a=2.0)
    assert torch.equal(grad, before)


def test_non_contiguous_or_tracked_grad_refused():
    grad, weight, mask = _inputs((8, 12), torch.float32, seed=10)
    g_t = grad.t()
    before = g_t.clone()
    with pytest.raises(ValueError, match="contiguous"):
        masked_decay_(g_t, weight.t(), mask.t(), 0.5)
    assert torch.equal(g_t, before)
    with pytest.raises(ValueError, match="requires grad"):
        masked_decay_(grad.clone().requires_grad_(), weight, mask, 0.5)
    # the reference returns a new tensor, so strided grad is fine there
    ref = masked_decay_reference(g_t, weight.t(), mask.t(), 0.5)
    assert torch.equal(ref, masked_decay_reference(g_t.contiguous(), weight.t(), mask.t(), 0.5))


def test_nocheck_refuses_tracked_grad_and_leaves_empty_or_zero_alpha_untouched():
    from kernels.ops.masked_decay import masked_decay_nocheck_

    grad, weight, mask = _inputs((8, 12), torch.bfloat16, seed=12)
    before = grad.clone()
    with pytest.raises(ValueError, match="requires grad"):
        masked_decay_nocheck_(grad.clone().requires_grad_(), weight, mask, 0.5)
    version = grad._version
    assert masked_decay_nocheck_(grad, weight, mask, 0.0) is grad
    assert torch.equal(grad, before) and grad._version == version  # nothing written
    e = torch.empty(0, 4, dtype=torch.bfloat16)
    assert masked_decay_nocheck_(e, e.clone(), torch.empty(0, 4, dtype=torch.bool), 1.0) is e


@pytest.mark.parametrize("plain", [False, True])
def test_cast_variant_empty_and_plain_path(plain, monkeypatch):
    """masked_decay_cast_nocheck without Triton (and on empty input, either path): a new tensor in
    weight's dtype, grad cast and decayed, against the float64 formula; empty in, empty out."""
    from kernels.ops.masked_decay import masked_decay_cast_nocheck

    if plain:
        monkeypatch.setattr(md_mod, "use_triton", lambda t: False)
    g0 = torch.Generator().manual_seed(13)
    g = torch.randn(24, 20, generator=g0).to(torch.bfloat16)
    w = torch.randn(24, 20, generator=g0)
    m = torch.rand(24, 20, generator=g0) < 0.5
    out = masked_decay_cast_nocheck(g, w, m, 0.25)
    assert out.dtype == torch.float32 and out.shape == g.shape
    expect = g.double() + 0.25 * w.double() * (~m).double()
    assert rel_err(out, expect) <= 1e-6
    assert torch.equal(out[m], g.float()[m])
    empty = masked_decay_cast_nocheck(
        torch.empty(0, 4, dtype=torch.bfloat16), torch.empty(0, 4), torch.empty(0, 4, dtype=torch.bool), 0.5
    )
    assert empty.shape == (0, 4) and empty.dtype == torch.float32


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_mismatch():
    grad, weight, mask = _inputs((8, 8), torch.float32, seed=11)
    with pytest.raises(ValueError, match="one device"):
        masked_decay_(grad.cuda(), weight, mask.cuda(), 0.1)
    with pytest.raises(ValueError, match="one device"):
        masked_decay_(grad.cuda(), weight.cuda(), mask, 0.1)


@pytest.mark.parametrize("gdt", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(64, 96), (3, 1030)])
def test_cast_variant_equals_cast_then_decay(gdt, shape, monkeypatch):
    """masked_decay_cast_nocheck (one pass: cast the GEMM's gradient to the master dtype and decay)
    == the cast followed by the in-place kernel, bit for bit; its new output is poisoned (NaN)
    before the kernel writes it, and compared everywhere."""
    import kernels.ops.masked_decay as md
    from kernels.ops.masked_decay import masked_decay_cast_nocheck, masked_decay_nocheck_

    real_empty = torch.empty

    def poisoned_empty(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        return real_empty(*a, **kw).fill_(float("nan"))

    monkeypatch.setattr(md.torch, "empty", poisoned_empty)

    gen = torch.Generator().manual_seed(sum(shape))
    g = torch.randn(shape, generator=gen).to(gdt)
    w = torch.randn(shape, generator=gen)
    m = torch.rand(shape, generator=gen) > 0.5
    got = masked_decay_cast_nocheck(g, w, m, 0.37)
    ref = masked_decay_nocheck_(g.to(torch.float32).clone(), w, m, 0.37)
    assert got.dtype == torch.float32 and torch.equal(got, ref)
    assert torch.equal(got[m], g.to(torch.float32)[m])  # kept positions untouched
    assert not torch.equal(got[~m], g.to(torch.float32)[~m])
    with pytest.raises(ValueError):
        masked_decay_cast_nocheck(g, w[:1], m, 0.1)
