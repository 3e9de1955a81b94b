"""kernels.ops.pivot.kth_largest: the baselines' top-k pivot, exact where torch.topk's int32 k overflows."""

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k", [1, 17, 500, 999, 1000])
def test_kth_largest_beyond_topks_int32_k_is_still_exact(monkeypatch, dtype, k):
    """torch.topk's k is int32 on CUDA and silently wrong beyond it (a 7B pivot came back 0.0):
    with the limit lowered, every branch (top-k of the largest, of the smallest, the histogram
    select) gives the sorted k-th largest."""
    import kernels.ops.pivot as pv

    g = torch.Generator().manual_seed(k)
    mags = (torch.randn(1000, generator=g) * torch.logspace(-3, 1, 1000)).abs().to(dtype)
    want = mags.float().sort(descending=True).values[k - 1]
    assert pv.kth_largest(mags, k).item() == want.item()
    for limit in (0, 400):  # histogram select only; both top-k branches and the select by turns
        monkeypatch.setattr(pv, "TOPK_MAX_K", limit)
        got = pv.kth_largest(mags, k)
        assert got.dtype == torch.float32 and got.item() == want.item()


def test_kth_largest_rejects_bad_input():
    from kernels.ops.pivot import kth_largest

    with pytest.raises(ValueError, match="1 <= k"):
        kth_largest(torch.ones(4), 5)
    with pytest.raises(ValueError, match="1-D"):
        kth_largest(torch.ones(2, 2), 1)
