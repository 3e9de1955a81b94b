"""The float32 window pivot (kernels.ops._pivot_f32_triton, interpreter): bit for bit the four-pass
radix select (pivot, tie share, #(above), #(equal), non-finite count) where the window holds rank k
(the radix passes then read only the compacted window) and where it misses (a sample far off, a
window too full for its buffer, k == 0, NaN/Inf: every value is read); more tensors than one launch
takes; counters and bins left zeroed for the next call; FlexMasker's masks on it; bad buffers refused."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.ops import _pivot_f32_triton as pf
from kernels.ops._pivot_radix_triton import COUNTS_LEN, HIST_LEN, NONFINITE
from kernels.ops.pivot_radix import RadixPivot

pytestmark = pytest.mark.usefixtures("one_thread")


def _check_equal(ts: list[torch.Tensor], k: int, calls: int = 1, **kw: object) -> int:
    """Window pivot == radix select (state bit for bit, the three counts), ``calls`` times on the
    same buffers (each call leaves them ready for the next); returns the miss flag."""
    flats = [t.reshape(-1) for t in ts]
    n = sum(f.numel() for f in flats)
    counts = torch.zeros(pf.F32_WINDOW_COUNTS_LEN, dtype=torch.int64)
    compact = torch.full((pf.compact_capacity(n),), float("nan"))
    radix = RadixPivot(ts, k / n)
    assert radix.k == k
    radix.pivot()
    missed = []
    for _ in range(calls):
        state = torch.full((2,), float("nan"))
        for kernel, grid, args, warps in pf.f32_window_pivot_launches(flats, counts, compact, state, k, **kw):
            kernel[grid](*args, num_warps=warps)
        assert torch.equal(state.view(torch.int32), radix.state.view(torch.int32)), (k, state, radix.state)
        assert counts[NONFINITE:COUNTS_LEN].tolist() == radix.counts[NONFINITE:].tolist()
        assert not counts[:HIST_LEN].any() and not counts[pf.SAMPLE_AT : pf.CTL_AT].any(), "bins not cleared"
        ctl = counts[pf.CTL_AT :]
        assert not ctl[pf.ABOVE : pf.LO].any() and ctl[pf.SAMPLE_TICKET] == 0, "counters not cleared"
        missed.append(int(ctl[pf.MISSED]))
    assert len(set(missed)) == 1
    return missed[0]


def _representative(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Weights whose sample (one 16-value sector of each 16 * WINDOW_SAMPLE-value span) holds the
    same keys as the rest: every sector of a span is the same 16 values to within 1e-5."""
    n = math.prod(shape)
    spans = n // (16 * pf.WINDOW_SAMPLE)
    base = torch.randn(spans, 1, 16, generator=g)
    x = base * (1 + 1e-5 * torch.rand(spans, pf.WINDOW_SAMPLE, 16, generator=g))
    return x.reshape(shape)


def test_hit_reads_only_the_window():
    """More tensors than one launch takes (and one too small to be sampled): the window holds
    rank k at three densities and the radix passes read the compacted window alone."""
    g = torch.Generator().manual_seed(0)
    shapes = [(128, 384), (2048,), (96, 512)] + [(64, 64)] * 6
    ts = [_representative(s, g) for s in shapes] + [torch.randn(77, generator=g)]
    n = sum(t.numel() for t in ts)
    for d, calls in ((0.1, 1), (0.5, 2), (0.9, 1)):
        assert _check_equal(ts, round(d * n), calls) == 0, d
    # a 16-key window; the compacting pass in smaller blocks, more programs, fewer warps
    assert _check_equal(ts, round(0.3 * n), window=16, count_block=1024, count_programs=64, count_warps=4) == 0


def test_edge_of_exact_zeros_hits():
    """A trainer's regime (its masks re-applied: the pruned half of the weights exact zeros, some
    kept below the median and some pruned above it, +0 and -0): rank k just inside the kept values,
    at the last kept one, and among the zeros. The window runs from key 0, counts the zeros
    without copying them, holds rank k each time, and the result is exact."""
    g = torch.Generator().manual_seed(7)
    pruned = []
    for i, s in enumerate(((128, 384), (96, 512))):
        t = _representative(s, g)
        keep = (t.abs() > t.abs().median()) ^ (torch.rand(s, generator=g) < 0.02)
        pruned.append(torch.where(keep, t, torch.tensor(-0.0 if i else 0.0)))
    nonzero = sum(int((t != 0).sum()) for t in pruned)
    for k in (nonzero - 40, nonzero, nonzero + 1, nonzero + 40):
        assert _check_equal(pruned, k) == 0, k


def test_edge_of_exact_zeros_over_two_launches():
    """More tensors than one launch takes (two compacting launches, one hit kernel): the zeros the
    hit kernel derives (n - above - copied) span both launches' tensors, and the result is exact."""
    g = torch.Generator().manual_seed(11)
    pruned = []
    for _ in range(pf.MAX_TENSORS + 2):
        t = _representative((32, 256), g)
        keep = (t.abs() > t.abs().median()) ^ (torch.rand(t.shape, generator=g) < 0.02)
        pruned.append(torch.where(keep, t, torch.tensor(0.0)))
    nonzero = sum(int((t != 0).sum()) for t in pruned)
    for k in (nonzero - 20, nonzero, nonzero + 20):
        assert _check_equal(pruned, k) == 0, k


def test_miss_reads_every_value():
    """A sample unlike the rest (large values exactly where the sample reads): the window misses,
    the radix passes read every value, and the result is still exact."""
    span = pf.BLOCK * pf.WINDOW_SAMPLE
    x = torch.full((2 * span,), 0.001)
    r = torch.arange(2 * pf.BLOCK)
    spans = r // 16  # sector s % WINDOW_SAMPLE of span s (kernels.ops._pivot_triton.block_offsets)
    x[spans * 16 * pf.WINDOW_SAMPLE + (spans % pf.WINDOW_SAMPLE) * 16 + r % 16] = 5.0
    x += 1e-4 * torch.rand(x.shape, generator=torch.Generator().manual_seed(3))
    assert _check_equal([x], x.numel() // 2) == 1


def test_packed_counts_at_every_block_size():
    """The compacting pass sums a block's three counts as packed fields: int32 for blocks of 256
    and 512 values, int64 for 1024 and 2048; the same result at each (a hit), and a NaN counted."""
    g = torch.Generator().manual_seed(7)
    x = _representative((128, 384), g)
    for block in (256, 512, 1024, 2048):
        assert _check_equal([x], x.numel() // 2, count_block=block, count_programs=8) == 0, block
        y = x.clone()
        y[5, 7] = float("nan")
        assert _check_equal([y], x.numel() // 2, count_block=block, count_programs=8) == 1, block
        _, counts = pf.f32_window_pivot([y], x.numel() // 2, count_block=block, count_programs=8)
        assert counts[NONFINITE] == 1, block


def test_edge_cases():
    """k at both ends and 0; few distinct values (ties: a full window overflows its buffer);
    exact zeros at the pivot; NaN and Inf (a miss; the count of non-finite values)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(20_000, generator=g)
    for k in (0, 1, x.numel()):
        _check_equal([x], k)
    state, _ = pf.f32_window_pivot([x], 0)
    assert state.tolist() == [math.inf, 1.0]
    tied = (torch.randn(20_000, generator=g) * 4).round() / 4
    zeros = torch.zeros(10_000)
    for ts in ([tied], [tied, zeros]):
        n = sum(t.numel() for t in ts)
        for k in (n // 10, n - 5):
            _check_equal(ts, k)
    for bad in (float("nan"), -float("inf")):
        y = x.clone()
        y[123] = bad
        assert _check_equal([y], x.numel() // 2) == 1
        _, counts = pf.f32_window_pivot([y], x.numel() // 2)
        assert counts[NONFINITE] == 1


def test_flex_masker_takes_the_window(monkeypatch):
    """FlexMasker on float32 weights from F32_WINDOW_MIN_VALUES (lowered here) builds the window
    pivot and its masks equal flex_mask's with the exact pivot and tie share."""
    from kernels.ops.flex import FlexMasker, flex_mask, tie_share
    from kernels.ops.patterns import TBS
    from kernels.ops.pivot import find_pivot

    monkeypatch.setattr(pf, "F32_WINDOW_MIN_VALUES", 1 << 14)
    g = torch.Generator().manual_seed(1)
    ws = [torch.randn(*s, generator=g) for s in ((128, 128), (64, 256), (256, 64))]
    masker = FlexMasker(ws, TBS(4), 0.5, seed=3)
    assert masker._radix and masker._f32_window
    got = masker()
    piv = find_pivot(ws, 0.5)
    tie = tie_share(ws, piv, 0.5)
    assert masker.pivot_and_tie() == (piv, torch.tensor(tie, dtype=torch.float32).item())
    for w, m in zip(ws, got, strict=True):
        assert torch.equal(m, flex_mask(w, TBS(4), 0.5, "fast", 3, piv, tie=tie))


def test_bad_buffers_refused():
    x = torch.randn(10_000)
    counts = torch.zeros(pf.F32_WINDOW_COUNTS_LEN, dtype=torch.int64)
    compact, state = torch.empty(pf.compact_capacity(x.numel())), torch.zeros(2)
    with pytest.raises(ValueError, match="counts"):
        pf.f32_window_pivot_launches([x], counts[:-1], compact, state, 10)
    with pytest.raises(ValueError, match="state"):
        pf.f32_window_pivot_launches([x], counts, compact, state.double(), 10)
    with pytest.raises(ValueError, match="compact"):
        pf.f32_window_pivot_launches([x], counts, compact[:10], state, 10)
    with pytest.raises(TypeError, match="float32"):
        pf.f32_window_pivot_launches([x.half()], counts, compact, state, 10)
    with pytest.raises(ValueError, match="window"):
        pf.f32_window_pivot_launches([x], counts, compact, state, 10, window=12)
    with pytest.raises(ValueError, match="count_block"):
        pf.f32_window_pivot_launches([x], counts, compact, state, 10, count_block=1000)
    with pytest.raises(ValueError, match="no values"):
        pf.f32_window_pivot_launches([x[:0]], counts, compact, state, 0)
