"""repro.tp_step's chunked counts and the baselines' gathered top-k pivot: the same values as
``kernels.ops.flex_torch.pivot_and_tie`` (which sums whole bool tensors through an int64 copy:
33.5 GiB at 7B-cut17 world 4), on fresh random inputs with ties, at chunk sizes that split them."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.flex_torch import pivot_and_tie
from repro import tp_step


@pytest.mark.parametrize("chunk", [7, 64, 1 << 27])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_counts_match_whole_tensor_counts(monkeypatch, chunk, dtype):
    monkeypatch.setattr(tp_step, "COUNT_CHUNK", chunk)
    g = torch.Generator().manual_seed(chunk)
    ws = [torch.randn(s, generator=g).to(dtype) for s in ((33, 5), (16,), (4, 4, 3))]
    pivot = float(ws[0].abs().float().flatten()[3])  # a value present: ties counted
    got = tp_step.count_above_and_at(ws, pivot)
    a = torch.cat([w.abs().float().flatten() for w in ws])
    assert got.dtype == torch.int64 and got.tolist() == [int((a > pivot).sum()), int((a == pivot).sum())]


@pytest.mark.parametrize("chunk", [5, 1 << 27])
@pytest.mark.parametrize("frac", [0.0, 0.3, 0.5, 1.0])
def test_gathered_pivot_equals_pivot_and_tie(monkeypatch, chunk, frac):
    monkeypatch.setattr(tp_step, "COUNT_CHUNK", chunk)
    g = torch.Generator().manual_seed(int(frac * 10) + chunk)
    mags = torch.randn(301, generator=g).bfloat16().float().abs()  # bf16 values: many ties
    k = round(frac * mags.numel())
    got = tp_step.gathered_pivot_and_tie(mags, k)
    want = pivot_and_tie([mags], k)
    assert [float(x) for x in got] == [float(x) for x in want]
    assert all(x.dtype == torch.float32 and x.dim() == 0 for x in got)


@pytest.mark.parametrize("density", [0.0, 0.25, 0.5, 1.0])
def test_fast_pivot_over_one_buffer_equals_pivot_over_the_pieces(density):
    """ShardMasker's FAST pivot searches one buffer of |w|: the same pivot and tie share as the
    search and the counts over the pieces themselves, on bf16-valued weights (many ties)."""
    from kernels.ops.flex import tie_share
    from kernels.ops.patterns import parse_pattern
    from kernels.ops.pivot import find_pivot_stats

    g = torch.Generator().manual_seed(int(density * 100))
    ws = [torch.randn(s, generator=g).bfloat16().float() for s in ((64, 32), (32, 64), (128, 32))]
    masker = tp_step.ShardMasker(ws, "fast", parse_pattern("TBS(4)"), density, None)
    got = masker.pivot()
    p = find_pivot_stats(ws, density, "gaussian", None, check_finite=False).pivot
    assert got == (p, tie_share(ws, p, density))
    assert all(w.dtype == torch.float32 for w in ws)  # the pieces are untouched (abs on a copy)
    assert bool((ws[0] < 0).any())
