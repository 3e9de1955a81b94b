"""The graph-safe no-check kernel entry points SparseLinear uses (``mvue24_nocheck``,
``masked_decay_nocheck_``): the same results as the checked ones, the seed advanced on the
device, the plain-PyTorch path, bad metadata refused."""

from __future__ import annotations

import pytest
import torch

import kernels.ops.masked_decay as md_mod
from kernels.ops.masked_decay import masked_decay_, masked_decay_nocheck_
from kernels.ops.mvue import mvue24, mvue24_nocheck, mvue24_reference, mvue24_seed_tensor, mvue24_uniforms

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")


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


@pytest.mark.parametrize("dim", [-1, 0])
def test_mvue24_nocheck_plain_path_writes_the_mask(plain_torch, dim):
    """Plain PyTorch: out and mask_out (poisoned, with a tail) receive exactly what
    mvue24(x, dim, seed=s, return_mask=True) returns on that path."""
    x = (torch.randn(8, 16, generator=torch.Generator().manual_seed(20)) * 2).to(torch.bfloat16)
    st = torch.tensor([12345], dtype=torch.int64)
    buf = torch.full((128 + 8,), float("nan"), dtype=x.dtype)
    mbuf = torch.ones(128 + 8, dtype=torch.bool)
    out = mvue24_nocheck(x, dim, seed_tensor=st, out=buf[:128].view(8, 16), mask_out=mbuf[:128].view(8, 16))
    ref, ref_mask = mvue24(x, dim, seed=12345, return_mask=True)
    assert torch.equal(out, ref) and torch.equal(mbuf[:128].view(8, 16), ref_mask)
    assert (ref_mask.movedim(dim, -1).reshape(-1, 4).sum(-1) == 2).all()
    assert torch.isnan(buf[128:]).all() and mbuf[128:].all() and int(st) == 12346


def test_mvue24_nocheck_refuses_foreign_buffers():
    x = torch.randn(8, 16)
    st = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        mvue24_nocheck(x, seed_tensor=st, out=[0.0] * 128)
    with pytest.raises(TypeError, match="mask_out has dtype"):
        mvue24_nocheck(x, seed_tensor=st, mask_out=torch.zeros(8, 16))
    with pytest.raises(ValueError, match="seed_tensor is on meta"):
        mvue24_nocheck(x, seed_tensor=torch.zeros(1, dtype=torch.int64, device="meta"))
    assert int(st) == 0  # nothing was drawn


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
