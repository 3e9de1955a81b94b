"""kernels.ops.cslt_pack, the fused MVUE + transpose + pack: equal to MVUE then packing, bit for
bit, and the first-use self test of the kernel paths (passes on a right kernel, fails on a corrupted
one)."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.cslt_pack import cslt_pack_reference, cslt_unpack_reference
from tests.kernels.cslt_pack_helpers import DTYPES, bits


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(64, 32), (128, 96)])
def test_mvue_pack_matches_mvue_then_pack(dname, shape):
    """One pass (MVUE of x^T + transpose + pack) == mvue24_nocheck of the transposed copy, then
    packing with its keep-mask, bit for bit; both advance the seed tensor by one."""
    from kernels.ops.cslt_pack import cslt_pack_mvue_t
    from kernels.ops.mvue import mvue24_nocheck

    dt = DTYPES[dname]
    t, n = shape
    gen = torch.Generator().manual_seed(t + n)
    x = torch.randn(t, n, generator=gen).to(dt)
    x[:8, :4] = 0  # degenerate groups (all zero, single nonzero)
    x[9, 1] = 1.0
    x[10, 2] = 50.0  # a dominant element
    seed = torch.tensor([12345], dtype=torch.int64)
    seed_ref = seed.clone()
    keep = torch.empty(n, t, dtype=torch.bool)
    g = mvue24_nocheck(x.t().contiguous(), -1, seed_tensor=seed_ref, mask_out=keep)
    ours = cslt_pack_mvue_t(x, seed)
    assert torch.equal(bits(ours), bits(cslt_pack_reference(g, keep)))
    assert int(seed) == int(seed_ref) == 12346
    assert torch.equal(cslt_unpack_reference(ours, n, t), g)
    again = cslt_pack_mvue_t(x, seed)  # the next call draws afresh
    assert not torch.equal(bits(again), bits(ours))
    with pytest.raises(ValueError, match="T % 64"):
        cslt_pack_mvue_t(x[:32], seed)


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
def test_self_test_of_kernel_paths_passes(dname):
    """The first-use self test (pair through a transposed view, fused MVUE) passes where the
    kernel is right (here: the interpreter), and fails when the kernel's output is corrupted."""
    import kernels.ops.cslt_pack as cp

    g = torch.Generator().manual_seed(0)
    assert cp._self_test_paths(torch.device("cpu"), DTYPES[dname], g)
    real = cp.cslt_pack_mvue_t
    try:
        cp.cslt_pack_mvue_t = lambda x, s: real(x, s).neg()  # noqa: E731 (a corrupted kernel)
        assert not cp._self_test_paths(torch.device("cpu"), DTYPES[dname], g)
    finally:
        cp.cslt_pack_mvue_t = real
