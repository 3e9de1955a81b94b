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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kth_largest_on_cuda_past_int32_k():
    """The size where torch.topk's k overflowed (7B at world 4: k = 3.7e9 of 7.4e9): 2^32 + 2^20
    bf16 magnitudes (8.6 GB), k in the middle, checked by counts (> p fewer than k, >= p at least k)."""
    import kernels.ops.pivot as pv

    n = (1 << 32) + (1 << 20)
    if torch.cuda.get_device_properties(0).total_memory < 3 * n * 2:
        pytest.skip("needs about 26 GB of GPU memory")
    mags = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(7)
    for part in mags.split(1 << 28):  # |N(0, 1)| in pieces (randn of 2^32 at once needs float32 room)
        part.copy_(torch.randn(part.numel(), device="cuda", generator=g).abs())
    k = n // 2 + 12345
    assert k > pv.TOPK_MAX_K and n - k + 1 > pv.TOPK_MAX_K
    p = pv.kth_largest(mags, k)
    gt = sum(int((c.float() > p).sum()) for c in mags.split(1 << 28))
    ge = sum(int((c.float() >= p).sum()) for c in mags.split(1 << 28))
    assert gt < k <= ge, (float(p), gt, ge, k)


@pytest.mark.parametrize("k", [1, 2, 50, 99, 100, 101, 199, 200])
def test_the_cuda_topk_branch_agrees_with_kthvalue(k):
    """The CUDA branch (topk of the smaller side) ran only on a GPU; here both branches on the CPU,
    with ties, against a sort."""
    from kernels.ops.pivot import _kth_largest_torch

    x = torch.randint(0, 40, (200,), generator=torch.Generator().manual_seed(k)).float()
    want = float(torch.sort(x, descending=True).values[k - 1])
    assert _kth_largest_torch(x, k, topk=True) == want == _kth_largest_torch(x, k, topk=False)
