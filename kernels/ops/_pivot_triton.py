"""Triton two-pass histogram select of the k-th largest |w| of 16-bit weights (bf16 / fp16).

A non-negative 16-bit float orders like its 15 magnitude bits, so rank k is found exactly by two
histograms: 256 bins of the high 8 bits (pass 1), then 128 bins of the low 7 bits among the values
in the bucket that holds rank k (pass 2; each program finds that bucket itself from pass 1's
histogram, so the passes run back to back with no host round trip). Each program accumulates
``tl.histogram`` over many blocks in registers and adds it to the global counts once. The caller
reads the 384 counts back in one copy (``kernels.ops.pivot.pivot_and_tie_16bit``); the reference is
the same select written with ``torch.bincount`` (``pivot_and_tie_16bit_reference``)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

HIST_LEN = 384  # 256 high-byte bins, then 128 low-bit bins
INFO_LEN = 3  # after the bins, the select kernel writes: non-finite count, #(|w| > pivot), #(|w| == pivot)
COUNTS_LEN = HIST_LEN + INFO_LEN
NONFINITE, GT, EQ = HIST_LEN, HIST_LEN + 1, HIST_LEN + 2
BLOCK = 4096  # values per block of the histogram kernels
_MAX_PROGRAMS = 1024


@triton.jit
def _hist16_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    hist_ptr, k, iters, PASS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # up to 8 tensors read in place (no concatenation copy): xi holds ni values, its blocks start
    # at global block si (s0 = 0; an unused slot has n = 0 and a start past every block)
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    ar = tl.arange(0, 256)
    if PASS == 2:
        # bucket of rank k: the first high-byte bin, from the top, whose running count reaches k
        rev = tl.load(hist_ptr + 255 - ar)
        cum = tl.cumsum(rev, 0)
        bucket = 255 - tl.min(tl.where(cum >= k, ar, 256), 0)
    else:
        bucket = 0
    # as few bins as each pass needs (tl.histogram's cost grows with them: 256 bins for pass 1,
    # 128 for pass 2, where values outside the bucket are clamped into its end bins and taken
    # out again by count): results/tuning/h100_probe_hist16.txt
    NB: tl.constexpr = 256 if PASS == 1 else 128
    acc = tl.zeros([NB], dtype=tl.int32)
    off0 = tl.zeros([1], dtype=tl.int32)  # taken out of bin 0: padding lanes (and pass 2: below)
    off_top = tl.zeros([1], dtype=tl.int32)  # taken out of the top bin (pass 2: above the bucket)
    for i in range(iters):
        g = i * nprog + pid  # global block
        x, n, start = x0, n0, 0
        if g >= s1:
            x, n, start = x1, n1, s1
        if g >= s2:
            x, n, start = x2, n2, s2
        if g >= s3:
            x, n, start = x3, n3, s3
        if g >= s4:
            x, n, start = x4, n4, s4
        if g >= s5:
            x, n, start = x5, n5, s5
        if g >= s6:
            x, n, start = x6, n6, s6
        if g >= s7:
            x, n, start = x7, n7, s7
        offs = (g - start) * BLOCK + tl.arange(0, BLOCK)
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
    if PASS == 1:
        tl.atomic_add(hist_ptr + ar2, acc.to(tl.int64))
    else:
        tl.atomic_add(hist_ptr + 256 + ar2, acc.to(tl.int64))


MAX_TENSORS = 8  # tensors per histogram launch


def tensor_slots(flats: list[torch.Tensor]) -> tuple[tuple, int, int]:
    """The launch arguments that spread up to ``MAX_TENSORS`` flat tensors over one grid of
    ``BLOCK``-value blocks (the kernels' x0..x7, n0..n7, s1..s7: unused slots hold no values and
    start past every block), the number of programs and the blocks each program reads."""
    if not 1 <= len(flats) <= MAX_TENSORS:
        raise ValueError(f"one launch takes 1..{MAX_TENSORS} tensors, got {len(flats)}")
    sizes = [f.numel() for f in flats]
    blocks = [triton.cdiv(n, BLOCK) for n in sizes]
    total = sum(blocks)
    starts = [sum(blocks[:i]) for i in range(1, len(flats))]
    pad = MAX_TENSORS - len(flats)
    ptrs = list(flats) + [flats[0]] * pad
    sizes += [0] * pad
    starts += [total + 1] * pad  # past every block: never selected
    programs = max(1, min(total, _MAX_PROGRAMS))
    return (*ptrs, *sizes, *starts), programs, triton.cdiv(total, programs)


def hist16_launch(flats16: list[torch.Tensor], hist: torch.Tensor, k: int, pass_: int) -> tuple:
    """(kernel, grid, every argument in signature order, warps) of one histogram pass over up to
    ``MAX_TENSORS`` flat int16 views, read in place."""
    slots, programs, iters = tensor_slots(flats16)
    return _hist16_kernel, (programs,), (*slots, hist, k, iters, pass_, BLOCK), 8


def select16_launch(counts: torch.Tensor, state: torch.Tensor, k: int, dtype: torch.dtype, clear: bool) -> tuple:
    """(kernel, grid, every argument in signature order, warps) of the device select."""
    if counts.dtype != torch.int64 or counts.numel() < COUNTS_LEN or not counts.is_contiguous():
        raise ValueError(f"counts must be a contiguous int64 tensor of {COUNTS_LEN} values")
    if state.dtype != torch.float32 or state.numel() < 2 or counts.device != state.device:
        raise ValueError("state must be a float32 tensor of 2 values on the device of counts")
    if dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"the 16-bit select needs bf16 or fp16, got {dtype}")
    return _select16_kernel, (1,), (counts, state, k, dtype == torch.bfloat16, clear), 4


def hist16_counts(tensors: list[torch.Tensor], k: int, max_tensors: int = MAX_TENSORS) -> torch.Tensor:
    """Both passes over ``tensors`` (one dtype, one device), read in place in launches of up to
    ``max_tensors`` each; returns the 384 counts on the device."""
    dev = tensors[0].device
    hist = torch.zeros(HIST_LEN, dtype=torch.int64, device=dev)
    flats = [t.reshape(-1).view(torch.int16) for t in tensors if t.numel()]
    groups = [flats[i : i + max_tensors] for i in range(0, len(flats), max_tensors)]
    for pass_ in (1, 2):
        for group in groups:
            kernel, grid, args, warps = hist16_launch(group, hist, k, pass_)
            kernel[grid](*args, num_warps=warps)
    return hist


@triton.jit
def _select16_kernel(hist_ptr, state_ptr, k, IS_BF16: tl.constexpr, CLEAR: tl.constexpr):
    # one program: the host's _select_from_counts and _nonfinite_from_high, on the device
    ar = tl.arange(0, 256)
    hi = tl.load(hist_ptr + ar)
    first = (0x7F80 >> 7) if IS_BF16 else (0x7C00 >> 7)  # high bytes of Inf / NaN magnitudes
    nonfinite = tl.sum(tl.where(ar >= first, hi, 0), 0)
    # bucket: walking the high bins from the top, the first whose running count reaches k
    rev = tl.load(hist_ptr + 255 - ar)
    cum = tl.cumsum(rev, 0)
    i_hi = tl.min(tl.where(cum >= k, ar, 256), 0)  # 256: not reached (the host loop ends at 0)
    above = tl.sum(tl.where(ar < i_hi, rev, 0), 0)
    bucket = 255 - tl.minimum(i_hi, 255)
    ar2 = tl.arange(0, 128)
    rlo = tl.load(hist_ptr + 256 + 127 - ar2)
    cum2 = above + tl.cumsum(rlo, 0)
    i_lo = tl.min(tl.where(cum2 >= k, ar2, 128), 0)
    gt = above + tl.sum(tl.where(ar2 < i_lo, rlo, 0), 0)
    low = 127 - tl.minimum(i_lo, 127)
    eq = tl.sum(tl.where(ar2 == tl.minimum(i_lo, 127), rlo, 0), 0)
    bits = (bucket << 7) | low
    if IS_BF16:  # bf16 is the top half of a float32
        pivot = (bits.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        pivot = bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    # tie share as the host computes it: a float64 quotient (k - gt, eq exact in float64), then
    # clamped; stored as float32 (the host's float becomes float32 as a kernel argument)
    share = (k - gt).to(tl.float64) / tl.maximum(eq, 1).to(tl.float64)
    share = tl.minimum(tl.maximum(share, 0.0), 1.0)
    share = tl.where(eq > 0, share, 1.0)
    pivot = tl.where(k > 0, pivot, float("inf"))  # k == 0 keeps nothing
    share = tl.where(k > 0, share, 1.0)
    if CLEAR:  # leave zeroed bins for the next call (saves a memset launch)
        tl.debug_barrier()  # every thread has read the bins before any is zeroed
        tl.store(hist_ptr + ar, tl.zeros([256], dtype=tl.int64))
        tl.store(hist_ptr + 256 + ar2, tl.zeros([128], dtype=tl.int64))
    tl.store(state_ptr, pivot)
    tl.store(state_ptr + 1, share.to(tl.float32))
    tl.store(hist_ptr + 384, nonfinite.to(tl.int64))
    tl.store(hist_ptr + 385, gt.to(tl.int64))
    tl.store(hist_ptr + 386, eq.to(tl.int64))


def select16(counts: torch.Tensor, state: torch.Tensor, k: int, dtype: torch.dtype, clear: bool = False) -> None:
    """Select on the device from ``counts`` (int64 [COUNTS_LEN], bins filled by both passes):
    ``state`` (float32 [2]) <- (pivot, tie share); counts[NONFINITE, GT, EQ] <- the non-finite
    count, #(|w| > pivot), #(|w| == pivot). ``clear`` zeroes the 384 bins after reading them."""
    kernel, grid, args, warps = select16_launch(counts, state, k, dtype, clear)
    kernel[grid](*args, num_warps=warps)
