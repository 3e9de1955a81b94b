"""Triton passes of the gaussian pivot search (``kernels.ops.pivot``, method ``"gaussian"``): the
bin counts of |x| against sorted float32 edges (``_count_ge``; with the edges [pivot, next float]
also FAST's tie counts in ``repro.tp_step.ShardMasker``), the compaction of the |x| inside an
interval (``_Values.compact_between``) and the float64 sums of |x| and x^2 that fit the Gaussian,
each one read of ``x`` with no magnitude copy written. Strided inputs are made contiguous first.

Bin counts: a value at or above the last edge adds to the last count by a plain reduction, a value
inside [first edge, last edge) finds its bin by a branch-free binary search over the edges (LOG2
gathers from a table of 2**LOG2 entries that stays in L1) and is counted by a masked
``tl.histogram``; a value below the first edge is not counted. The gathers are masked to the
values inside, which in the search's first round are about 5% of them. Each program adds its
counts to the output once.

The reference is ``torch.bucketize(|x|, edges, right=True)`` then ``torch.bincount``.

Compaction: every program writes the |x| of its block that lie in [lo, hi) (float32 bit patterns)
after a block prefix sum, at an offset taken from a global counter by one atomic a block; the
order of the output is not defined (the search only counts and selects in it). The same read
counts the values at or above hi (the search's first round keeps only the fit's interval and
needs the count above it). The reference is ``|x|[(|x| >= lo) & (|x| < hi)]`` and
``(|x| >= hi).sum()``."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import triton
import triton.language as tl

# launch settings: the fastest of scripts/probes/gpu_probe_gaussian_kernels.py's sweep on an H100
# (results/tuning/h100_probe_gaussian_kernels.txt)
BLOCK = 1024  # values per block
WARPS = 4
WAVES = 16  # programs an SM (at most), each looping over its blocks
# Integer arguments are not specialised (Triton would compile a variant for every new pattern of
# "equals 1" and "divisible by 16" among n, the interval's bit patterns, the bound and the loop
# count, which change with the weights: in fast_figure3_e2e at a4f6ae2 such compiles landed in
# timed steps, 80-368 ms of pivot at world 4 against 6-7 ms).
_SLICE = 1 << 30  # values a launch at most (its counts are int32)
_INT32_MAX = 0x7FFFFFFF  # padding of the edge table: above every |x| bit pattern but NaN's largest


@triton.jit(do_not_specialize=["n", "n_edges", "iters"])
def _bin_count_kernel(
    x_ptr, n, edges_ptr, n_edges, out_ptr, iters,
    LOG2: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    first = tl.load(edges_ptr)
    last = tl.load(edges_ptr + n_edges - 1)
    NB: tl.constexpr = 1 << LOG2
    acc = tl.zeros([NB], dtype=tl.int32)
    top = tl.zeros([BLOCK], dtype=tl.int32)
    for it in range(iters):
        offs = (it * nprog + pid) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
        b = tl.abs(v).to(tl.int32, bitcast=True)
        top += (m & (b >= last)).to(tl.int32)
        inside = m & (b >= first) & (b < last)
        # pos = #(edges <= b): binary lifting over the padded table (its entry NB - 1 is padding)
        pos = tl.zeros([BLOCK], dtype=tl.int32)
        for s in tl.static_range(LOG2):  # steps 2**(LOG2 - 1), ..., 2, 1
            e = tl.load(edges_ptr + pos + ((1 << (LOG2 - 1 - s)) - 1), mask=inside, other=0x7FFFFFFF)
            pos = tl.where(e <= b, pos + (1 << (LOG2 - 1 - s)), pos)
        acc += tl.histogram(pos, NB, mask=inside)
    ar = tl.arange(0, NB)
    # bin j >= 1 of pos is count j - 1 of the output; the values at or above the last edge go last
    tl.atomic_add(out_ptr + ar - 1, acc, mask=(ar >= 1) & (acc > 0))
    tl.atomic_add(out_ptr + n_edges - 1, tl.sum(top, 0))


_SMS: dict[int, int] = {}


def _programs(x: torch.Tensor, blocks: int, waves: int = WAVES) -> int:
    if not x.is_cuda:
        return min(blocks, 4)
    i = x.device.index if x.device.index is not None else torch.cuda.current_device()
    if i not in _SMS:
        _SMS[i] = torch.cuda.get_device_properties(i).multi_processor_count
    return max(1, min(blocks, _SMS[i] * waves))


def bin_counts_ge_triton(
    x: torch.Tensor, edges: torch.Tensor, *, block: int = BLOCK, num_warps: int = WARPS, waves: int = WAVES
) -> torch.Tensor:
    """int64 [len(edges)]: entry j counts |x| in [edges[j], edges[j + 1]) (the last entry: at or
    above the last edge; values below the first edge are not counted). ``x``: 1-D contiguous
    fp32/bf16/fp16 (counted in slices of 2**30 values); ``edges``: int32 float32 bit patterns, strictly
    increasing, non-negative, on x's device."""
    x = x.contiguous()  # a strided 1-D view (w[::2]) would otherwise be read as if dense
    e = edges.numel()
    # the table holds the edges and at least one padding entry; two sizes only (the tie counts'
    # 2 edges, the search's up to 127), so that no call compiles another variant
    log2 = 2 if e <= 3 else max(7, e.bit_length())
    table = torch.full((1 << log2,), _INT32_MAX, dtype=torch.int32, device=x.device)
    table[:e] = edges
    total = torch.zeros(e, dtype=torch.int64, device=x.device)
    for part in x.split(_SLICE):  # int32 counts inside a launch
        out = torch.zeros(e, dtype=torch.int32, device=x.device)
        n = part.numel()
        blocks = triton.cdiv(n, block)
        grid = _programs(part, blocks, waves)
        iters = triton.cdiv(blocks, grid)
        _bin_count_kernel[(grid,)](part, n, table, e, out, iters, LOG2=log2, BLOCK=block, num_warps=num_warps)
        total += out
    return total


@triton.jit(do_not_specialize=["n", "lo", "hi", "cap", "iters"])
def _compact_kernel(x_ptr, n, lo, hi, out_ptr, counter_ptr, cap, iters, BLOCK: tl.constexpr):
    # counter[0]: values inside [lo, hi) (all of them, also past cap); counter[1]: values at or above hi
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    above = tl.zeros([BLOCK], dtype=tl.int32)
    for it in range(iters):
        offs = (it * nprog + pid) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        a = tl.abs(tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32))
        b = a.to(tl.int32, bitcast=True)
        above += (m & (b >= hi)).to(tl.int32)
        keep = m & (b >= lo) & (b < hi)
        k = keep.to(tl.int32)
        total = tl.sum(k, 0).to(tl.int64)
        if total > 0:
            base = tl.atomic_add(counter_ptr, total)
            at = base + tl.cumsum(k, 0) - 1
            tl.store(out_ptr + at, a, mask=keep & (at < cap))
    tl.atomic_add(counter_ptr + 1, tl.sum(above, 0).to(tl.int64))


def compact_count_triton(
    chunks: Iterable[torch.Tensor],
    lo: int,
    hi: int,
    cap: int,
    device: torch.device,
    *,
    block: int = BLOCK,
    num_warps: int = WARPS,
    waves: int = WAVES,
) -> tuple[torch.Tensor, int, int]:
    """(kept, inside, above): ``kept`` holds float32 |x| of the 1-D contiguous fp32/bf16/fp16
    ``chunks`` (each under 2**31 values, all on one device) that lie in [lo, hi) (float32 bit
    patterns, 0 <= lo < hi), in no defined order, on ``device`` (theirs); ``inside`` counts those
    values and ``above`` the ones at or above ``hi``. ``kept`` holds at most ``cap`` of them: where
    ``inside > cap`` it holds an arbitrary ``cap`` of them and the caller must not use it (the
    search then compacts again with the exact count). One read of the chunks, one host read."""
    out = torch.empty(max(cap, 1), dtype=torch.float32, device=device)
    counter = torch.zeros(2, dtype=torch.int64, device=device)  # over all chunks: may pass 2**31
    for x in chunks:
        x = x.contiguous()  # a strided 1-D view would otherwise be read as if dense
        n = x.numel()
        if n:
            blocks = triton.cdiv(n, block)
            grid = _programs(x, blocks, waves)
            iters = triton.cdiv(blocks, grid)
            _compact_kernel[(grid,)](x, n, lo, hi, out, counter, cap, iters, BLOCK=block, num_warps=num_warps)
    inside, above = counter.tolist()
    return out[: min(inside, cap)], inside, above


def compact_between_triton(
    chunks: Iterable[torch.Tensor],
    lo: int,
    hi: int,
    cap: int,
    device: torch.device,
    *,
    block: int = BLOCK,
    num_warps: int = WARPS,
    waves: int = WAVES,
) -> torch.Tensor:
    """float32 |x| of the 1-D contiguous fp32/bf16/fp16 ``chunks`` (each under 2**31 values, all
    on one device) that lie in [lo, hi) (float32 bit patterns, 0 <= lo < hi), in no defined order,
    in one buffer on ``device`` (theirs; no chunks: an empty result). ``cap``: an upper bound on
    their number (the search knows one from its global counts); a count above it raises (one host
    read at the end)."""
    kept, got, _ = compact_count_triton(chunks, lo, hi, cap, device, block=block, num_warps=num_warps, waves=waves)
    if got > cap:
        raise RuntimeError(f"gaussian pivot: {got} values inside the interval, more than the bound {cap} (a bug)")
    return kept


def above_and_at_triton(x: torch.Tensor, pivot: float) -> torch.Tensor:
    """int64 [#(|x| > pivot), #(|x| == pivot)] of the 1-D contiguous fp32/bf16/fp16 ``x`` (pivot
    a non-negative float32 value or +inf): the bin counts against the edges [pivot, next float]."""
    b = int(torch.tensor([pivot], dtype=torch.float32).view(torch.int32).item())
    at, above = bin_counts_ge_triton(x, torch.tensor([b, b + 1], dtype=torch.int32, device=x.device)).unbind()
    return torch.stack([above, at])


@triton.jit(do_not_specialize=["n", "iters"])
def _abs_sums_kernel(x_ptr, n, out_ptr, iters, BLOCK: tl.constexpr):
    # program p writes its float64 sums of |x| and x^2 to out[p] and out[nprog + p]
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    s1 = tl.zeros([BLOCK], dtype=tl.float64)
    s2 = tl.zeros([BLOCK], dtype=tl.float64)
    for it in range(iters):
        offs = (it * nprog + pid) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float64)
        s1 += tl.abs(v)
        s2 += v * v
    tl.store(out_ptr + pid, tl.sum(s1, 0))
    tl.store(out_ptr + nprog + pid, tl.sum(s2, 0))


def abs_sums_triton(x: torch.Tensor, *, block: int = 1024, num_warps: int = 8, waves: int = 16) -> torch.Tensor:
    """float64 [sum |x|, sum x^2] of the 1-D contiguous fp32/bf16/fp16 ``x``, in one read: each
    program sums its blocks in a fixed order and the programs' sums are added by ``torch.sum``, so
    the result is the same on every call with the same grid (float64 squares of float32 values are
    exact; the sums round differently from ``torch.linalg.vector_norm``'s, which first copies the
    values to float64)."""
    x = x.contiguous()  # a strided 1-D view would otherwise be read as if dense
    n = x.numel()
    if n == 0:
        return torch.zeros(2, dtype=torch.float64, device=x.device)
    blocks = triton.cdiv(n, block)
    grid = _programs(x, blocks, waves)
    part = torch.empty(2, grid, dtype=torch.float64, device=x.device)
    _abs_sums_kernel[(grid,)](x, n, part, triton.cdiv(blocks, grid), BLOCK=block, num_warps=num_warps)
    return part.sum(1)
