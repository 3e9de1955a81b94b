"""The device select of the 16-bit pivot (kernels.ops._pivot_triton.select16, interpreter): pivot,
tie share and counts equal the host select, k == 0 and clear=False, non-finite counts, and bad
input."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.ops.pivot import find_pivot

pytestmark = pytest.mark.usefixtures("one_thread")


def _device_select(ts: list[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Both histogram passes, then the device select: (state [pivot, tie], counts)."""
    from kernels.ops._pivot_triton import COUNTS_LEN, hist16_counts, select16

    counts = torch.zeros(COUNTS_LEN, dtype=torch.int64)
    counts[:384] = hist16_counts(ts, k)
    state = torch.full((2,), float("nan"))
    select16(counts, state, k, ts[0].dtype, clear=True)
    return state, counts


def _cases(dtype: torch.dtype) -> list[tuple[list[torch.Tensor], int]]:
    g = torch.Generator().manual_seed(11)
    out = []
    for i in range(24):  # random sizes, scales and densities; every other one heavily tied
        n = int(torch.randint(1, 2000, (1,), generator=g))
        scale = float(10 ** torch.randint(-6, 3, (1,), generator=g))
        x = torch.randn(n, generator=g) * scale
        x = (x * 4).round() / 4 if i % 2 else x
        out.append(([x.to(dtype)], int(torch.randint(1, n + 1, (1,), generator=g))))
    x = torch.randn(777, generator=g).to(dtype)
    out += [([x], 1), ([x], 777), ([x, -x[:5]], 782)]  # k edge cases
    out += [([torch.zeros(64, dtype=dtype)], 10), ([torch.full((50,), -1.5, dtype=dtype)], 7)]  # all tied
    tiny = torch.tensor([1, 2, 3, 0x80, 0x81], dtype=torch.int16).view(dtype)  # subnormals, bucket 0 and 1
    out += [([tiny], k) for k in range(1, 6)]
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_select_kernel_equals_host_select(dtype):
    """Pivot, tie share (as float32, bit for bit) and counts of the device select == the host's."""
    from kernels.ops._pivot_triton import EQ, GT, NONFINITE, hist16_counts
    from kernels.ops.flex import tie_share
    from kernels.ops.pivot import _select_from_counts

    for ts, k in _cases(dtype):
        state, counts = _device_select(ts, k)
        hist = hist16_counts(ts, k)
        piv, tie = _select_from_counts(hist[:256].tolist(), hist[256:].tolist(), k, dtype)
        assert state[0].item() == piv, (k, state, piv)
        assert state[1].view(torch.int32).item() == torch.tensor([tie]).view(torch.int32).item(), (k, state, tie)
        mags = torch.cat([t.float().abs() for t in ts])
        assert counts[GT].item() == int((mags > piv).sum()) and counts[EQ].item() == int((mags == piv).sum())
        assert counts[NONFINITE].item() == 0
        assert not counts[:384].any(), "clear=True must zero the bins"
        n = mags.numel()
        assert piv == find_pivot(ts, k / n) and tie == pytest.approx(tie_share(ts, piv, k / n), abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_select_kernel_k_zero_and_no_clear(dtype):
    from kernels.ops._pivot_triton import COUNTS_LEN, hist16_counts, select16

    x = torch.randn(300).to(dtype)
    counts = torch.zeros(COUNTS_LEN, dtype=torch.int64)
    counts[:384] = hist16_counts([x], 0)
    before = counts[:384].clone()
    state = torch.zeros(2)
    select16(counts, state, 0, dtype)  # k == 0 keeps nothing: +inf, tie 1 (as pivot_and_tie_16bit)
    assert state.tolist() == [math.inf, 1.0]
    assert torch.equal(counts[:384], before), "clear=False must leave the bins"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "-nan"])
def test_select_kernel_counts_nonfinite(dtype, bad):
    from kernels.ops._pivot_triton import NONFINITE, hist16_counts
    from kernels.ops.pivot import _nonfinite_from_high

    x = torch.randn(1000).to(dtype)
    x[[3, 500, 999]] = float("nan") if bad == "-nan" else bad
    if bad == "-nan":
        x[3] = -x[3]  # sign bit set: still a NaN magnitude
    x[7] = torch.finfo(dtype).max  # the largest finite value must not count
    state, counts = _device_select([x], 400)
    assert counts[NONFINITE].item() == 3 == _nonfinite_from_high(hist16_counts([x], 400)[:256].tolist(), dtype)
    state, counts = _device_select([torch.randn(1000).to(dtype)], 400)
    assert counts[NONFINITE].item() == 0


def test_select_kernel_bad_input():
    from kernels.ops._pivot_triton import COUNTS_LEN, select16

    good = torch.zeros(COUNTS_LEN, dtype=torch.int64)
    with pytest.raises(ValueError, match="int64"):
        select16(torch.zeros(COUNTS_LEN, dtype=torch.int32), torch.zeros(2), 1, torch.bfloat16)
    with pytest.raises(ValueError, match="int64"):
        select16(torch.zeros(10, dtype=torch.int64), torch.zeros(2), 1, torch.bfloat16)
    with pytest.raises(ValueError, match="float32"):
        select16(good, torch.zeros(2, dtype=torch.float64), 1, torch.bfloat16)
    with pytest.raises(TypeError, match="bf16 or fp16"):
        select16(good, torch.zeros(2), 1, torch.float32)
