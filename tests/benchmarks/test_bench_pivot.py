"""Exact pivot of 16-bit weights (``pivot_and_tie_16bit``, the Triton two-pass histogram select) on
the 7 bf16 weights of one MAP-NEO 460M block and on a Llama-2 13B FFN weight 13824x5120, density
0.5; plus ``find_pivot`` ("exact", "radix") at 13824x5120. Pivot and tie share are checked equal
to ``pivot_and_tie_16bit_reference`` and the pivot to ``find_pivot(method="exact")`` before they
are timed (uncaptured: the calls return host floats). GB/s counts the kernel's two reads of the
weights (for the block, the call's copy of the 7 tensors into one before the passes is not counted)."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.pivot import find_pivot, pivot_and_tie_16bit, pivot_and_tie_16bit_reference
from repro.models.llama import CONFIGS, block_linear_shapes
from tests.benchmarks import DEVICE, paper_params, run_benchmark

DENSITY = 0.5  # as suites/figure3.py
BLOCK_460M = [(o, i) for _, o, i in block_linear_shapes(CONFIGS["map-neo-460m"])]  # 1024x1024 x4, ...
BLOCK_TINY = [(32, 32)] * 4 + [(96, 32)] * 2 + [(32, 96)]  # same layout, hidden 32, FFN 96
FFN_13B, FFN_TINY = [(13824, 5120)], [(64, 128)]
CASES = [("map-neo-460m-block-bf16", BLOCK_460M, BLOCK_TINY), ("13824x5120-bf16", FFN_13B, FFN_TINY)]
FIND_CASES = [(f"13824x5120-bf16-{m}", (*FFN_13B[0], m), (*FFN_TINY[0], m)) for m in ("exact", "radix")]


def _weights(shapes: list[tuple[int, int]]) -> list[torch.Tensor]:
    """bf16 weights of std 0.02 (as suites/figure3.py: many ties at the pivot)."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    return [(0.02 * torch.randn(o, i, device=DEVICE, generator=gen)).to(torch.bfloat16) for o, i in shapes]


@pytest.mark.parametrize("shapes", paper_params(CASES))
def test_pivot_and_tie_16bit(benchmark, shapes, copy_gbps):
    ws = _weights(shapes)
    fn = lambda: pivot_and_tie_16bit(ws, DENSITY)  # noqa: E731

    pivot, tie = fn()
    assert (pivot, tie) == pivot_and_tie_16bit_reference(ws, DENSITY), "kernel differs from the bincount reference"
    assert pivot == find_pivot(ws, DENSITY, method="exact"), "pivot differs from find_pivot(method='exact')"
    assert 0.0 < tie <= 1.0, f"tie share {tie} out of (0, 1]"

    nbytes = 2 * sum(w.numel() * w.element_size() for w in ws)  # two passes, each reads every weight
    # graph=False: the call returns host floats (it syncs), so it cannot be captured
    assert run_benchmark(benchmark, fn, nbytes=nbytes, copy_gbps=copy_gbps, graph=False) == (pivot, tie)


@pytest.mark.parametrize("shapes", paper_params(CASES))
def test_pivot_and_tie_16bit_captured(benchmark, shapes, copy_gbps):
    """The device part of ``pivot_and_tie_16bit`` (both histogram passes and the select into a
    device state, as ``FlexMasker`` launches them), CUDA-graph captured: the gated twin of the
    uncaptured benchmark above, whose events also span host work (``repro.bench_gate.host_synced``)."""
    from kernels.ops._pivot_triton import COUNTS_LEN, MAX_TENSORS, hist16_launch, select16

    ws = _weights(shapes)
    n = sum(w.numel() for w in ws)
    k = round(DENSITY * n)
    counts = torch.zeros(COUNTS_LEN, dtype=torch.int64, device=DEVICE)
    state = torch.zeros(2, dtype=torch.float32, device=DEVICE)
    flats = [w.reshape(-1).view(torch.int16) for w in ws]
    groups = [flats[i : i + MAX_TENSORS] for i in range(0, len(flats), MAX_TENSORS)]

    def fn() -> torch.Tensor:
        for p in (1, 2):
            for g in groups:
                kernel, grid, args, warps = hist16_launch(g, counts, k, p)
                kernel[grid](*args, num_warps=warps)
        select16(counts, state, k, ws[0].dtype, clear=True)  # leaves the bins zeroed for the next call
        return state

    want = pivot_and_tie_16bit_reference(ws, DENSITY)
    same = lambda st: (float(st[0]), float(st[1])) == (want[0], float(torch.tensor(want[1], dtype=torch.float32)))  # noqa: E731
    assert same(fn()), f"device pivot {fn().tolist()} != reference {want}"
    nbytes = 2 * sum(w.numel() * w.element_size() for w in ws)  # two passes, each reads every weight
    run_benchmark(benchmark, fn, nbytes=nbytes, copy_gbps=copy_gbps, recheck=same)


@pytest.mark.parametrize("shapes", paper_params(CASES))
def test_window_pivot_captured(benchmark, shapes, copy_gbps):
    """The window pivot (``window_pivot_launches``, as ``FlexMasker`` launches it from 2**20 values:
    a 1/32 sample's two passes, one counting pass, the select; the exact passes only on a miss),
    CUDA-graph captured, beside the two-pass twin above. GB/s counts one read of the weights."""
    from kernels.ops._pivot_triton import WINDOW_COUNTS_LEN, window_pivot_launches

    ws = _weights(shapes)
    k = round(DENSITY * sum(w.numel() for w in ws))
    counts = torch.zeros(WINDOW_COUNTS_LEN, dtype=torch.int64, device=DEVICE)
    state = torch.zeros(2, dtype=torch.float32, device=DEVICE)
    launches = window_pivot_launches([w.reshape(-1).view(torch.int16) for w in ws], counts, state, k, ws[0].dtype)

    def fn() -> torch.Tensor:
        for kernel, grid, args, warps in launches:
            kernel[grid](*args, num_warps=warps)
        return state

    want = pivot_and_tie_16bit_reference(ws, DENSITY)
    same = lambda st: (float(st[0]), float(st[1])) == (want[0], float(torch.tensor(want[1], dtype=torch.float32)))  # noqa: E731
    assert same(fn()), f"window pivot {fn().tolist()} != reference {want}"
    nbytes = sum(w.numel() * w.element_size() for w in ws)  # one pass reads every weight (the sample: 1/32)
    run_benchmark(benchmark, fn, nbytes=nbytes, copy_gbps=copy_gbps, recheck=same)


@pytest.mark.parametrize("case", paper_params(FIND_CASES))
def test_find_pivot(benchmark, case):
    r, c, method = case
    (w,) = _weights([(r, c)])
    fn = lambda: find_pivot(w, DENSITY, method=method)  # noqa: E731

    pivot = fn()
    ref, _ = pivot_and_tie_16bit_reference(w, DENSITY)
    assert pivot == ref, f"{method} pivot {pivot} != reference {ref}"

    # no GB/s: the methods' traffic (float32 |w| temporaries, compactions) is not one read
    assert run_benchmark(benchmark, fn, graph=False) == pivot  # returns a host float: not capturable


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shapes", paper_params(CASES[:1]))
def test_radix_pivot(benchmark, shapes, dtype, copy_gbps):
    """``RadixPivot.pivot()`` in one process (FAST's pivot in ``repro.tp_step``: four histogram
    passes and the device select, no host sync), CUDA-graph captured, on one MAP-NEO 460M block's
    weights in float32 (the end-to-end step's master weights) and bf16."""
    from kernels.ops.flex import tie_share
    from kernels.ops.pivot_radix import RadixPivot

    ws = [w.to(dtype) for w in _weights(shapes)]
    r = RadixPivot(ws, DENSITY)
    want = find_pivot(ws, DENSITY, method="exact")
    want = (want, float(torch.tensor(tie_share(ws, want, DENSITY), dtype=torch.float32)))
    same = lambda st: (float(st[0]), float(st[1])) == want  # noqa: E731

    def fn() -> torch.Tensor:
        r.pivot()
        return r.state

    assert same(fn()), f"radix pivot {fn().tolist()} != exact {want}"
    nbytes = 4 * sum(w.numel() * w.element_size() for w in ws)  # four passes, each reads every weight
    run_benchmark(benchmark, fn, nbytes=nbytes, copy_gbps=copy_gbps, recheck=same)
