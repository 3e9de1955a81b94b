"""Triton four-pass radix select of the k-th largest |w| of float weights (fp32, bf16, fp16), with
the digit histograms left on the device between passes so that a caller can all-reduce them over a
process group (``kernels.ops.pivot_radix``).

|w| cast to float32 orders like its 31 magnitude bits, so rank k is found exactly digit by digit:
bits 23..30 (pass 1: the exponent; bin 255 holds Inf and NaN), 15..22, 7..14, then 0..6. Pass p
reads the histograms of passes 1..p-1 (global after the caller's all-reduce), walks them from the
top to the prefix that holds rank k, and counts the next digit of the values with that prefix
(values above or below it are clamped into the end bins and taken out again by count, as in
``kernels.ops._pivot_triton``). The select kernel walks all four histograms: pivot, #(|w| > pivot),
#(|w| == pivot), tie share, non-finite count, all on the device (no host round trip)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops._pivot_triton import BLOCK, MAX_TENSORS, block_slot, tensor_slots  # the same spread over a grid

PASSES = 4
HIST_LEN = 256 * PASSES
INFO_LEN = 3  # after the bins, the select kernel writes: non-finite count, #(|w| > pivot), #(|w| == pivot)
COUNTS_LEN = HIST_LEN + INFO_LEN
NONFINITE, GT, EQ = HIST_LEN, HIST_LEN + 1, HIST_LEN + 2


@triton.jit
def _radix_hist_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    hist_ptr, k, iters, ctl_ptr, PASS: tl.constexpr, BLOCK: tl.constexpr, MODE: tl.constexpr = 0,
):  # fmt: skip
    # up to 8 tensors read in place: xi holds ni values, its blocks start at global block si.
    # MODE 0: always runs, rank k. The float32 window pivot (_pivot_f32_triton) reads rank k from
    # ctl_ptr + 1 and runs MODE 1 (every value) only where its window missed (ctl_ptr + 0 holds 1),
    # MODE 2 only where it hit: over x0, its compacted window, whose size is at ctl_ptr + 3, and
    # the window's exact zeros, counted at ctl_ptr + 11.
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    if MODE != 0:  # MODE 0 compiles to the same code as before the modes (scripts/probes/cpu_sass_compare.py)
        missed = tl.load(ctl_ptr)
        run = missed if MODE == 1 else 1 - missed
        k = tl.load(ctl_ptr + 1)
        if MODE == 2:
            n0 = tl.load(ctl_ptr + 3).to(tl.int32)  # as the other sizes (the window holds < 2**31 values)
            iters = tl.cdiv(n0, nprog * BLOCK)
        iters = iters * run
    ar = tl.arange(0, 256)
    # the digit of this pass: bits SHIFT.. of |w| (7 bits in the last pass); the prefix: bits PSHIFT..30
    SHIFT: tl.constexpr = 23 - 8 * (PASS - 1) if PASS < 4 else 0
    PSHIFT: tl.constexpr = SHIFT + 8 if PASS < 4 else 7
    FIELD: tl.constexpr = 0xFF if PASS < 4 else 0x7F
    prefix = tl.zeros([1], dtype=tl.int32).sum(0)
    above = tl.zeros([1], dtype=tl.int64).sum(0)
    for lvl in tl.static_range(PASS - 1):  # the prefix of rank k from the earlier digits
        rev = tl.load(hist_ptr + lvl * 256 + 255 - ar)
        cum = above + tl.cumsum(rev, 0)
        i = tl.min(tl.where(cum >= k, ar, 256), 0)
        above += tl.sum(tl.where(ar < i, rev, 0), 0)
        prefix = (prefix << 8) | (255 - tl.minimum(i, 255))
    acc = tl.zeros([256], dtype=tl.int32)
    off0 = tl.zeros([1], dtype=tl.int32)  # taken out of bin 0: padding lanes, values below the prefix
    off_top = tl.zeros([1], dtype=tl.int32)  # taken out of bin 255: values above the prefix
    for it in range(iters):
        g = it * nprog + pid  # global block
        x, n, start = block_slot(
            g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
        )
        offs = (g - start) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(x + offs, mask=m, other=0.0).to(tl.float32).to(tl.int32, bitcast=True) & 0x7FFFFFFF
        if PASS == 1:  # noqa: SIM108 (a constexpr branch inside a Triton kernel)
            b = tl.where(m, v >> 23, 0)
            off0 += tl.sum((~m).to(tl.int32), 0)
        else:
            hp = v >> PSHIFT
            b = tl.where(m & (hp == prefix), (v >> SHIFT) & FIELD, tl.where(m & (hp > prefix), 255, 0))
            off0 += tl.sum((~m | (hp < prefix)).to(tl.int32), 0)
            off_top += tl.sum((m & (hp > prefix)).to(tl.int32), 0)
        acc += tl.histogram(b, 256)
    acc -= tl.where(ar == 0, tl.sum(off0, 0), 0)
    acc -= tl.where(ar == 255, tl.sum(off_top, 0), 0)
    if MODE == 0:
        tl.atomic_add(hist_ptr + (PASS - 1) * 256 + ar, acc.to(tl.int64))
    else:  # an idle guarded program adds nothing
        acc64 = acc.to(tl.int64)
        if MODE == 2:  # the window's zeros (not compacted: ctl_ptr + 11), in bin 0 while the prefix is 0
            zeros = tl.load(ctl_ptr + 11) * run
            acc64 += tl.where((ar == 0) & (pid == 0) & (prefix == 0), zeros, 0)
        tl.atomic_add(hist_ptr + (PASS - 1) * 256 + ar, acc64, mask=acc64 != 0)


@triton.jit
def _radix_select_kernel(hist_ptr, state_ptr, k, ctl_ptr, CLEAR: tl.constexpr, DEVICE_K: tl.constexpr = False):
    # one program: the four digits of rank k, then the counts above and at the pivot. DEVICE_K
    # (the float32 window pivot): rank k at ctl_ptr + 1, and ctl_ptr + 2 values above the
    # histogrammed ones (its window's #(above) where it hit, else 0) added to #(|w| > pivot)
    base = tl.zeros([1], dtype=tl.int64).sum(0)
    if DEVICE_K:
        k = tl.load(ctl_ptr + 1)
        base += tl.load(ctl_ptr + 2)
    ar = tl.arange(0, 256)
    nonfinite = tl.sum(tl.where(ar == 255, tl.load(hist_ptr + ar), 0), 0)  # exponent all ones
    bits = tl.zeros([1], dtype=tl.int32).sum(0)
    above = tl.zeros([1], dtype=tl.int64).sum(0)
    gt = above
    eq = above
    for lvl in tl.static_range(4):
        rev = tl.load(hist_ptr + lvl * 256 + 255 - ar)
        cum = above + tl.cumsum(rev, 0)
        i = tl.min(tl.where(cum >= k, ar, 256), 0)
        digit = 255 - tl.minimum(i, 255)
        if lvl < 3:
            above += tl.sum(tl.where(ar < i, rev, 0), 0)
            bits = (bits << 8) | digit
        else:
            gt = base + above + tl.sum(tl.where(ar < i, rev, 0), 0)
            eq = tl.sum(tl.where(ar == tl.minimum(i, 255), rev, 0), 0)
            bits = (bits << 7) | digit
    pivot = bits.to(tl.float32, bitcast=True)
    # tie share as kernels.ops.flex.tie_share computes it: a float64 quotient, clamped
    share = (k + base - gt).to(tl.float64) / tl.maximum(eq, 1).to(tl.float64)
    share = tl.minimum(tl.maximum(share, 0.0), 1.0)
    share = tl.where(eq > 0, share, 1.0)
    pivot = tl.where(k > 0, pivot, float("inf"))  # k == 0 keeps nothing
    share = tl.where(k > 0, share, 1.0)
    if CLEAR:  # leave zeroed bins for the next call (saves a memset launch)
        tl.debug_barrier()  # every thread has read the bins before any is zeroed
        for lvl in tl.static_range(4):
            tl.store(hist_ptr + lvl * 256 + ar, tl.zeros([256], dtype=tl.int64))
    tl.store(state_ptr, pivot)
    tl.store(state_ptr + 1, share.to(tl.float32))
    # NONFINITE, GT, EQ (1024, 1025, 1026: globals cannot be read inside a kernel)
    tl.store(hist_ptr + 1024, nonfinite.to(tl.int64))
    tl.store(hist_ptr + 1025, gt.to(tl.int64))
    tl.store(hist_ptr + 1026, eq.to(tl.int64))


def radix_hist_launch(flats: list[torch.Tensor], counts: torch.Tensor, k: int, pass_: int) -> tuple:
    """(kernel, grid, every argument in signature order, warps) of pass ``pass_`` (1..4) over up to
    ``MAX_TENSORS`` flat float tensors of one dtype, read in place."""
    if not 1 <= pass_ <= PASSES:
        raise ValueError(f"pass must be 1..{PASSES}, got {pass_}")
    slots, programs, iters = tensor_slots(flats)
    return _radix_hist_kernel, (programs,), (*slots, counts, k, iters, counts, pass_, BLOCK, 0), 8


def radix_hist_passes(flats: list[torch.Tensor], counts: torch.Tensor, k: int) -> list[list[tuple]]:
    """The launches of the four passes, one list per pass (a caller may all-reduce the pass's bins
    between lists): each pass reads ``flats`` in groups of ``MAX_TENSORS``, in place."""
    groups = [flats[i : i + MAX_TENSORS] for i in range(0, len(flats), MAX_TENSORS)]
    return [[radix_hist_launch(g, counts, k, p) for g in groups] for p in range(1, PASSES + 1)]


def radix_guarded_launch(
    flats: list[torch.Tensor], counts: torch.Tensor, ctl: torch.Tensor, pass_: int, mode: int
) -> tuple:
    """(kernel, grid, every argument in signature order, warps) of pass ``pass_`` for the float32
    window pivot (``kernels.ops._pivot_f32_triton``): ``mode`` 1 over ``flats`` only where its
    window missed, 2 over ``flats[0]`` (its compacted window, size and rank read from ``ctl``) only
    where it hit."""
    if not 1 <= pass_ <= PASSES or mode not in (1, 2):
        raise ValueError(f"pass must be 1..{PASSES} and mode 1 or 2, got {pass_}, {mode}")
    slots, programs, iters = tensor_slots(flats)
    return _radix_hist_kernel, (programs,), (*slots, counts, -1, iters if mode == 1 else -1, ctl, pass_, BLOCK, mode), 8


def radix_select_launch(
    counts: torch.Tensor, state: torch.Tensor, k: int, clear: bool, ctl: torch.Tensor | None = None
) -> tuple:
    """(kernel, grid, every argument in signature order, warps) of the device select; with ``ctl``
    (the float32 window pivot's control words) rank and #(above) are read from it."""
    if counts.dtype != torch.int64 or counts.numel() < COUNTS_LEN or not counts.is_contiguous():
        raise ValueError(f"counts must be a contiguous int64 tensor of {COUNTS_LEN} values")
    if state.dtype != torch.float32 or state.numel() < 2 or counts.device != state.device:
        raise ValueError("state must be a float32 tensor of 2 values on the device of counts")
    if ctl is not None:
        return _radix_select_kernel, (1,), (counts, state, k, ctl, clear, True), 4
    return _radix_select_kernel, (1,), (counts, state, k, counts, clear, False), 4
