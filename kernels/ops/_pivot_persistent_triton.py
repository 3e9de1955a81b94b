"""The window pivot in one persistent launch (issue 20; an experiment, not used by FlexMasker
until an H100 measures it against ``_pivot_triton.window_pivot_launches``' six launches).

On a MAP-NEO 460M block the window pivot takes about 38 us, of which its counting pass is 21 and
the rest five launches of fixed cost (the sample's two passes, the window select, the idle
fallback's two); a 50%-of-copy block leaves the pivot about 15 us (docs/methods.md). Here one grid
of one program per SM runs the same phases, separated by grid barriers instead of launches:

1. the sample's first pass (1/32 of the values: a 256-bin high-byte histogram);
2. its second pass (128 low bins of the bucket holding the sample's rank);
3. the counting pass over int32 words (two values a word, ``_window_pairs_kernel``'s SWAR counts
   of the 8-key window around the sample's rank, below it and non-finite);
4. every program reads the counts; on a miss (rank k outside the window, or a non-finite value)
   every program runs the two exact histogram passes, with a barrier after each;
5. the last program to finish (a ticket) writes the pivot, the tie share and the counts, and
   zeroes the bins and the barrier for the next call.

Same results as ``window_pivot`` (the same counts, select and tie share). A grid barrier needs
every program resident at once: the grid is one program per SM, and the kernel never lets the next
kernel launch early (no ``gdc_launch_dependents``; with ``PDL`` it only waits for the one before).
Under the interpreter programs run one after another, so there ``PHASE`` > 0 runs one phase per
launch (the host loops over them) and no barrier is ever taken.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops._chain_triton import chain_prologue
from kernels.ops._pivot_triton import (
    BLOCK,
    LO_AT,
    SAMPLE_AT,
    WIN_AT,
    WINDOW_SAMPLE,
    block_offsets,
    block_slot,
    last_program,
    pivot_and_share,
    rank_in_hist,
    sampled_values,
    tensor_slots,
    window_lowest_key,
)

PHASES = 6  # split mode: 1-2 sample passes, 3 counting pass, 4-5 the exact passes on a miss, 6 finish
SYNC_LEN = 3  # int64: the barrier's arrivals, the finishing ticket, the barrier's time-out flag
SPIN_LIMIT = tl.constexpr(1 << 22)  # polls of a barrier before it gives up (seconds, not a hang)
_SAMPLE_AT = tl.constexpr(SAMPLE_AT)  # the counts layout, as the kernels see it
_WIN_AT = tl.constexpr(WIN_AT)
_LO_AT = tl.constexpr(LO_AT)


@triton.jit
def _grid_barrier(bar_ptr, target):
    # wait until ``target`` programs have arrived (arrivals only grow within a launch: barrier j
    # waits for j * nprog); every thread's atomics before it are visible after it. A wait that
    # lasts past SPIN_LIMIT polls (a program that never became resident) gives up and raises the
    # flag at bar_ptr + 2, so a bad grid returns wrong counts and a raised flag, not a hung GPU
    tl.debug_barrier()
    tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
    seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
    spins = 0
    while (seen < target) & (spins < SPIN_LIMIT):
        seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
        spins += 1
    if seen < target:
        tl.atomic_xchg(bar_ptr + 2, 1)
    tl.debug_barrier()


@triton.jit
def _hist_pass(
    x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7,
    hist_ptr, k, iters, pid, nprog, PASS: tl.constexpr, SAMPLE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # one of _hist16_kernel's passes (unguarded, no select) as a device function; the bucket of
    # pass 2 is read past the L1 (other programs added to it in this launch)
    ar = tl.arange(0, 256)
    if PASS == 2:
        rev = tl.load(hist_ptr + 255 - ar, volatile=True)
        cum = tl.cumsum(rev, 0)
        bucket = 255 - tl.min(tl.where(cum >= k, ar, 256), 0)
    else:
        bucket = 0
    NB: tl.constexpr = 256 if PASS == 1 else 128
    acc = tl.zeros([NB], dtype=tl.int32)
    off0 = tl.zeros([1], dtype=tl.int32)
    off_top = tl.zeros([1], dtype=tl.int32)
    for i in range(iters):
        g = i * nprog + pid
        x, n, start = block_slot(
            g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
        )
        offs = block_offsets(g, start, BLOCK, SAMPLE)
        m = offs < n
        v = tl.load(x + offs, mask=m, other=0).to(tl.int32) & 0x7FFF
        if PASS == 1:  # noqa: SIM108 (a constexpr branch inside a Triton kernel)
            b = tl.where(m, v >> 7, 0)
            off0 += tl.sum((~m).to(tl.int32), 0)
        else:
            hb = v >> 7
            b = tl.where(m & (hb == bucket), v & 0x7F, tl.where(m & (hb > bucket), 127, 0))
            off0 += tl.sum((~m | (hb < bucket)).to(tl.int32), 0)
            off_top += tl.sum((m & (hb > bucket)).to(tl.int32), 0)
        acc += tl.histogram(b, NB)
    ar2 = tl.arange(0, NB)
    acc -= tl.where(ar2 == 0, tl.sum(off0, 0), 0)
    acc -= tl.where(ar2 == NB - 1, tl.sum(off_top, 0), 0)
    base = 0 if PASS == 1 else 256
    tl.atomic_add(hist_ptr + base + ar2, acc.to(tl.int64), mask=acc != 0)


@triton.jit
def _pair_count_pass(
    x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7,
    lo, win_ptr, iters, pid, nprog, INF_KEY: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # _window_pairs_kernel's counts as a device function (xi: int32 words), its 8-bit fields
    # summed into int64 every 126 blocks, so a program may read any number of blocks
    add_b = (0x8000 - lo) * 0x10001
    add_nf: tl.constexpr = (0x8000 - INF_KEY) * 0x10001
    ar = tl.arange(0, 8)
    win = tl.zeros([8], dtype=tl.int64)
    n_below = tl.zeros([], dtype=tl.int64)
    nf = tl.zeros([BLOCK], dtype=tl.int32)
    pad = tl.zeros([], dtype=tl.int64)
    r = tl.arange(0, BLOCK)
    for c0 in range(0, iters, 126):
        acc_even = tl.zeros([BLOCK], dtype=tl.int32)
        acc_odd = tl.zeros([BLOCK], dtype=tl.int32)
        below = tl.zeros([BLOCK], dtype=tl.int32)
        c_end = tl.minimum(c0 + 126, iters)
        for c in range(c0, c_end, 7):
            acc4 = tl.zeros([BLOCK], dtype=tl.int32)
            for i in range(c, tl.minimum(c + 7, c_end)):
                g = i * nprog + pid
                x, n, start = block_slot(
                    g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
                )
                offs = (g - start) * BLOCK + r
                pad += tl.minimum(tl.maximum((g - start + 1) * BLOCK - n, 0), BLOCK)
                v = tl.load(x + offs, mask=offs < n, other=0) & 0x7FFF7FFF
                nf |= v + add_nf
                u = (v + add_b) ^ -0x7FFF8000
                below += (u >> 15) & 0x10001
                in_lo = (u & 0xFFF8) == 0
                in_hi = (u & -0x80000) == 0
                acc4 += tl.where(in_lo, 1 << ((u & 7) * 4), 0) + tl.where(in_hi, 1 << ((u >> 14) & 28), 0)
            acc_even += acc4 & 0x0F0F0F0F
            acc_odd += (acc4 >> 4) & 0x0F0F0F0F
        for f in tl.static_range(4):
            win += tl.where(ar == 2 * f, tl.sum((acc_even >> (8 * f)) & 0xFF, 0), 0)
            win += tl.where(ar == 2 * f + 1, tl.sum((acc_odd >> (8 * f)) & 0xFF, 0), 0)
        n_below += tl.sum(below & 0xFFFF, 0).to(tl.int64) + tl.sum((below >> 16) & 0xFFFF, 0)
    halves = 2 * iters * BLOCK
    win -= tl.where((ar == 0) & (lo == 0), 2 * pad, 0)
    n_above = halves - n_below - tl.sum(win, 0) - tl.where(lo == 0, 2 * pad, 0)
    tl.atomic_add(win_ptr + ar, win, mask=win != 0)
    tl.atomic_add(win_ptr + 16, n_above)
    nonfinite = tl.max((((nf >> 15) & 0x10001) != 0).to(tl.int32), 0).to(tl.int64)
    tl.atomic_add(win_ptr + 17, nonfinite)


@triton.jit
def _window_select(lo, win_ptr, k):
    # _select_window's decision and counts (read past the L1), without writing anything
    ar = tl.arange(0, 8)
    rev = tl.load(win_ptr + 7 - ar, volatile=True)
    above = tl.load(win_ptr + 16, volatile=True)
    nonfinite = tl.load(win_ptr + 17, volatile=True)
    cum = above + tl.cumsum(rev, 0)
    i = tl.min(tl.where(cum >= k, ar, 8), 0)
    hit = (above < k) & (i < 8) & (nonfinite == 0)
    gt = above + tl.sum(tl.where(ar < i, rev, 0), 0)
    eq = tl.sum(tl.where(ar == i, rev, 0), 0)
    return hit, lo + 7 - i, gt, eq


@triton.jit
def _finish(counts_ptr, state_ptr, k, ks, IS_BF16: tl.constexpr):
    # one program, after every other is done: the pivot and tie share into state, #(non-finite),
    # #(> pivot), #(== pivot) into counts[384..386], the window's lowest key at LO_AT, and every
    # bin zeroed (sample, window, exact passes, miss flag) for the next call
    sample = counts_ptr + _SAMPLE_AT
    win = counts_ptr + _WIN_AT
    lo = window_lowest_key(sample, ks, 8, True)
    hit, bits_w, gt_w, eq_w = _window_select(lo, win, k)
    ar = tl.arange(0, 256)
    hi = tl.load(counts_ptr + ar, volatile=True)
    first = (0x7F80 >> 7) if IS_BF16 else (0x7C00 >> 7)
    nonfinite_h = tl.sum(tl.where(ar >= first, hi, 0), 0)
    bits_h, gt_h, eq_h = rank_in_hist(counts_ptr, k, True)
    bits = tl.where(hit, bits_w, bits_h)
    gt = tl.where(hit, gt_w, gt_h)
    eq = tl.where(hit, eq_w, eq_h)
    nonfinite = tl.where(hit, 0, nonfinite_h)
    pivot, share = pivot_and_share(bits, gt, eq, k, IS_BF16)
    tl.debug_barrier()  # every thread has read the bins before any is zeroed
    zeros = tl.zeros([256], dtype=tl.int64)
    tl.store(counts_ptr + ar, zeros)
    tl.store(counts_ptr + 256 + ar, zeros, mask=ar < 128)
    tl.store(sample + ar, zeros)
    tl.store(sample + 256 + ar, zeros, mask=ar < 128)
    tl.store(win + ar, zeros, mask=ar < 19)  # 8 window bins (16 slots), above, non-finite, flag
    tl.store(state_ptr, pivot)
    tl.store(state_ptr + 1, share)
    tl.store(counts_ptr + 384, nonfinite.to(tl.int64))
    tl.store(counts_ptr + 385, gt.to(tl.int64))
    tl.store(counts_ptr + 386, eq.to(tl.int64))
    tl.store(counts_ptr + _LO_AT, lo.to(tl.int64))


@triton.jit
def _window_pivot_persistent_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7,
    sx0, sx1, sx2, sx3, sx4, sx5, sx6, sx7, sn0, sn1, sn2, sn3, sn4, sn5, sn6, sn7, ss1, ss2, ss3, ss4, ss5, ss6, ss7,
    w0, w1, w2, w3, w4, w5, w6, w7, m0, m1, m2, m3, m4, m5, m6, m7, t1, t2, t3, t4, t5, t6, t7,
    counts_ptr, state_ptr, sync_ptr, k, ks, iters_all, iters_sample, iters_words,
    INF_KEY: tl.constexpr, BLOCK: tl.constexpr, SAMPLE: tl.constexpr, IS_BF16: tl.constexpr,
    PHASE: tl.constexpr, PDL: tl.constexpr = 0,
):  # fmt: skip
    # three slot sets over the same tensors: x/n/s every value (the exact passes, BLOCK values a
    # block), sx/sn/ss the sample (BLOCK * SAMPLE a block), w/m/t int32 words (BLOCK // 2 a block).
    # PHASE 0: every phase, with grid barriers (one program per SM); PHASE p > 0: phase p alone.
    chain_prologue(PDL & 1)  # wait for the kernel before; never let the next one start early
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    sample = counts_ptr + _SAMPLE_AT
    win = counts_ptr + _WIN_AT
    bar = sync_ptr
    if PHASE == 0 or PHASE == 1:
        _hist_pass(
            sx0, sx1, sx2, sx3, sx4, sx5, sx6, sx7, sn0, sn1, sn2, sn3, sn4, sn5, sn6, sn7, ss1, ss2, ss3, ss4, ss5,
            ss6, ss7, sample, ks, iters_sample, pid, nprog, 1, SAMPLE, BLOCK,
        )  # fmt: skip
    if PHASE == 0:
        _grid_barrier(bar, nprog)
    if PHASE == 0 or PHASE == 2:
        _hist_pass(
            sx0, sx1, sx2, sx3, sx4, sx5, sx6, sx7, sn0, sn1, sn2, sn3, sn4, sn5, sn6, sn7, ss1, ss2, ss3, ss4, ss5,
            ss6, ss7, sample, ks, iters_sample, pid, nprog, 2, SAMPLE, BLOCK,
        )  # fmt: skip
    if PHASE == 0:
        _grid_barrier(bar, 2 * nprog)
    if PHASE == 0 or PHASE == 3:
        lo = window_lowest_key(sample, ks, 8, True)
        _pair_count_pass(
            w0, w1, w2, w3, w4, w5, w6, w7, m0, m1, m2, m3, m4, m5, m6, m7, t1, t2, t3, t4, t5, t6, t7,
            lo, win, iters_words, pid, nprog, INF_KEY, BLOCK // 2,
        )  # fmt: skip
    if PHASE == 0:
        _grid_barrier(bar, 3 * nprog)
    if PHASE == 0 or PHASE == 4 or PHASE == 5:
        # every program reads the same counts, so all take the same branch (and barrier)
        hit, _, _, _ = _window_select(window_lowest_key(sample, ks, 8, True), win, k)
        if hit == 0:
            if PHASE == 0 or PHASE == 4:
                _hist_pass(
                    x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7,
                    counts_ptr, k, iters_all, pid, nprog, 1, 1, BLOCK,
                )  # fmt: skip
            if PHASE == 0:
                _grid_barrier(bar, 4 * nprog)
            if PHASE == 0 or PHASE == 5:
                _hist_pass(
                    x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7,
                    counts_ptr, k, iters_all, pid, nprog, 2, 1, BLOCK,
                )  # fmt: skip
            if PHASE == 0:
                _grid_barrier(bar, 5 * nprog)
    if PHASE == 0:  # noqa: SIM102 (a constexpr branch; the inner one is a runtime branch)
        if last_program(sync_ptr + 1, nprog):  # every other program is past its last read
            _finish(counts_ptr, state_ptr, k, ks, IS_BF16)
            tl.store(bar, 0)
    if PHASE == 6:
        _finish(counts_ptr, state_ptr, k, ks, IS_BF16)


def persistent_programs(device: torch.device) -> int:
    """One program per SM (every program must be resident for the grid barriers); 132 elsewhere."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def window_pivot_persistent_launches(
    flats16: list[torch.Tensor],
    counts: torch.Tensor,
    state: torch.Tensor,
    sync: torch.Tensor,
    k: int,
    dtype: torch.dtype,
    split: bool | None = None,
    programs: int | None = None,
    warps: int = 8,
) -> list[tuple]:
    """(kernel, grid, arguments, warps) of the persistent window pivot over up to 8 flat int16 views
    (even sizes, 4-byte aligned starts: the counting pass reads int32 words): one launch, or with
    ``split`` (default: under the interpreter) one launch per phase. ``counts``: int64
    [WINDOW_COUNTS_LEN] of zeros, left zeroed but for #(non-finite), #(> pivot), #(== pivot) and the
    window's lowest key, as ``window_pivot_launches`` leaves it; ``sync``: int64 [SYNC_LEN] of zeros
    (left zeroed but for sync[2], raised where a grid barrier timed out: the results are then
    wrong; see ``check_sync``); ``state``: float32 [2] <- (pivot, tie share)."""
    from kernels.ops._pivot_triton import WINDOW_COUNTS_LEN, pairable

    if counts.dtype != torch.int64 or counts.numel() < WINDOW_COUNTS_LEN or not counts.is_contiguous():
        raise ValueError(f"counts must be a contiguous int64 tensor of {WINDOW_COUNTS_LEN} values")
    if sync.dtype != torch.int64 or sync.numel() < SYNC_LEN or sync.device != counts.device:
        raise ValueError(f"sync must be an int64 tensor of {SYNC_LEN} values on the device of counts")
    if state.dtype != torch.float32 or state.numel() < 2 or state.device != counts.device:
        raise ValueError("state must be a float32 tensor of 2 values on the device of counts")
    if dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"the 16-bit window pivot needs bf16 or fp16, got {dtype}")
    flats = [f for f in flats16 if f.numel()]
    if not 1 <= len(flats) <= 8:
        raise ValueError(f"the persistent pivot takes 1..8 non-empty tensors, got {len(flats)}")
    if not all(pairable(f) for f in flats):
        raise ValueError("the persistent pivot reads int32 words: every tensor needs an even size and 4-byte alignment")
    if split is None:
        split = not counts.is_cuda
    nprog = programs or persistent_programs(counts.device)
    n = sum(f.numel() for f in flats)
    n_s = sum(sampled_values(f.numel(), WINDOW_SAMPLE) for f in flats)
    ks = min(n_s, max(1, round(k * n_s / n))) if k > 0 else 0
    every = tensor_slots(flats)[0]  # the slots do not depend on the grid; the iterations do
    sampled = tensor_slots(flats, block=BLOCK * WINDOW_SAMPLE)[0]
    words = tensor_slots([f.view(torch.int32) for f in flats], block=BLOCK // 2)[0]
    iters_all = _iters(flats, BLOCK, nprog)
    iters_sample = _iters(flats, BLOCK * WINDOW_SAMPLE, nprog)
    iters_words = _iters(flats, BLOCK, nprog)  # BLOCK // 2 words are BLOCK values
    inf_key = 0x7F80 if dtype == torch.bfloat16 else 0x7C00
    head = (*every, *sampled, *words, counts, state, sync, k, ks, iters_all, iters_sample, iters_words)
    consts = (inf_key, BLOCK, WINDOW_SAMPLE, dtype == torch.bfloat16)
    if not split:
        return [(_window_pivot_persistent_kernel, (nprog,), (*head, *consts, 0, 0), warps)]
    out = [(_window_pivot_persistent_kernel, (nprog,), (*head, *consts, p, 0), warps) for p in range(1, PHASES)]
    return out + [(_window_pivot_persistent_kernel, (1,), (*head, *consts, PHASES, 0), warps)]


def check_sync(sync: torch.Tensor) -> None:
    """Raise where a grid barrier of the last launch timed out (its programs were not all resident:
    too many programs for the GPU, or another kernel held SMs); reads the flag back (a host sync)."""
    if int(sync[2]) != 0:
        raise RuntimeError(
            "persistent window pivot: a grid barrier timed out (not every program was resident); "
            "its results are wrong: use fewer programs (at most one per SM)"
        )


def _iters(flats: list[torch.Tensor], block: int, programs: int) -> int:
    """Blocks each of ``programs`` programs reads to cover every block of ``flats``."""
    return triton.cdiv(sum(triton.cdiv(f.numel(), block) for f in flats), programs)


def window_pivot_persistent(
    tensors: list[torch.Tensor], k: int, split: bool | None = None, programs: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The persistent window pivot of the k-th largest |w| over 16-bit ``tensors``: (state [pivot,
    tie share], counts); a test and benchmark entry point, as ``_pivot_triton.window_pivot``."""
    from kernels.ops._pivot_triton import WINDOW_COUNTS_LEN

    dev = tensors[0].device
    counts = torch.zeros(WINDOW_COUNTS_LEN, dtype=torch.int64, device=dev)
    sync = torch.zeros(SYNC_LEN, dtype=torch.int64, device=dev)
    state = torch.full((2,), float("nan"), device=dev)
    flats = [t.reshape(-1).view(torch.int16) for t in tensors]
    launches = window_pivot_persistent_launches(flats, counts, state, sync, k, tensors[0].dtype, split, programs)
    for kernel, grid, args, warps in launches:
        kernel[grid](*args, num_warps=warps)
    check_sync(sync)
    return state, counts


__all__ = ["PHASES", "SYNC_LEN", "check_sync", "window_pivot_persistent", "window_pivot_persistent_launches"]
