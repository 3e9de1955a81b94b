"""Triton two-pass histogram select of the k-th largest |w| of 16-bit weights (bf16 / fp16).

A non-negative 16-bit float orders like its 15 magnitude bits, so rank k is found exactly by two
histograms: 256 bins of the high 8 bits (pass 1), then 128 bins of the low 7 bits among the values
in the bucket that holds rank k (pass 2; each program finds that bucket itself from pass 1's
histogram, so the passes run back to back with no host round trip). Each program accumulates
``tl.histogram`` over many blocks in registers and adds it to the global counts once. The caller
reads the 384 counts back in one copy (``kernels.ops.pivot.pivot_and_tie_16bit``); the reference is
the same select written with ``torch.bincount`` (``pivot_and_tie_16bit_reference``).

``FlexMasker`` selects with the window pivot below from 2**20 values (``window_pivot_launches``):
the two passes on a 1/32 sample, one counting pass, and the two passes on every value only where
the sample's window missed rank k; the same result, bit for bit."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops._chain_triton import chain_prologue

HIST_LEN = 384  # 256 high-byte bins, then 128 low-bit bins
INFO_LEN = 3  # after the bins, the select kernel writes: non-finite count, #(|w| > pivot), #(|w| == pivot)
COUNTS_LEN = HIST_LEN + INFO_LEN
NONFINITE, GT, EQ = HIST_LEN, HIST_LEN + 1, HIST_LEN + 2
BLOCK = 4096  # values per block of the histogram kernels
SAMPLES = (1, 16, 32, 64)  # read one 16-value sector in every SAMPLE (1: every value)
_MAX_PROGRAMS = 1024


@triton.jit
def block_slot(g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7):
    # the tensor that global block g falls in (``tensor_slots``' layout): pointer, size, first block
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
    return x, n, start


@triton.jit
def block_offsets(g, start, BLOCK: tl.constexpr, SAMPLE: tl.constexpr):
    # the BLOCK offsets a pass reads of block g: all values of a BLOCK-value block, or (SAMPLE > 1)
    # of a BLOCK * SAMPLE-value block one 16-value sector (32 bytes: one memory transaction) of
    # every 16 * SAMPLE-value span, so that every call of tl.histogram still counts BLOCK values.
    # Span s reads its sector s % SAMPLE: a row whose length is a multiple of the span is not
    # sampled at the same columns in every row (sector 0 everywhere was biased by per-column
    # scales: results/tuning/cpu_probe_f32_window_pivot.txt)
    r = tl.arange(0, BLOCK)
    if SAMPLE == 1:
        return (g - start) * BLOCK + r
    span = (g - start) * (BLOCK // 16) + r // 16  # the span's index in its tensor
    return span * (16 * SAMPLE) + (span % SAMPLE) * 16 + r % 16


@triton.jit
def _hist16_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    hist_ptr, k, iters, flag_ptr, state_ptr, ticket_ptr,
    PASS: tl.constexpr, BLOCK: tl.constexpr, SAMPLE: tl.constexpr, GUARDED: tl.constexpr,
    SELECT: tl.constexpr = False, IS_BF16: tl.constexpr = True, W: tl.constexpr = 8, KEY_SHIFT: tl.constexpr = 0,
    PDL: tl.constexpr = False,
):  # fmt: skip
    # up to 8 tensors read in place (no concatenation copy): xi holds ni values, its blocks start
    # at global block si (s0 = 0; an unused slot has n = 0 and a start past every block).
    # SAMPLE > 1 reads 1/SAMPLE of the values (the window pivot's sample); GUARDED runs only when
    # the window pivot missed (flag_ptr holds 1), else reads nothing and adds nothing. SELECT
    # (pass 2): the last program to finish (a ticket at ticket_ptr) selects as _select16_kernel
    # with CLEAR, so the select needs no launch of its own. SELECT == 2 (the window pivot's sample,
    # pass 2): the last program writes the lowest key of the W-key window around the sample's
    # rank k (int64, at state_ptr) and zeroes the bins, so the counting pass reads one value.
    # KEY_SHIFT 16: xi are float32 tensors read as int32, keyed by the top 16 bits of |w| (the
    # float32 window pivot, _pivot_f32_triton). PDL: a chained launch (_chain_triton).
    chain_prologue(PDL)
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    run = tl.full([], 1, tl.int32)
    if GUARDED:
        run = tl.load(flag_ptr).to(tl.int32)
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
    for i in range(iters * run):
        g = i * nprog + pid  # global block
        x, n, start = block_slot(
            g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
        )  # noqa: E501
        offs = block_offsets(g, start, BLOCK, SAMPLE)
        m = offs < n
        v = (tl.load(x + offs, mask=m, other=0).to(tl.int32) >> KEY_SHIFT) & 0x7FFF
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
    live = (ar2 < NB * run) & (acc != 0)  # an idle guarded pass adds nothing; nor do empty bins
    if PASS == 1:
        tl.atomic_add(hist_ptr + ar2, acc.to(tl.int64), mask=live)
    else:
        tl.atomic_add(hist_ptr + 256 + ar2, acc.to(tl.int64), mask=live)
    if SELECT == 1:  # noqa: SIM102 (a constexpr branch; the inner ones are runtime branches)
        if run != 0:  # noqa: SIM102
            if last_program(ticket_ptr, nprog):
                _select16(hist_ptr, state_ptr, k, IS_BF16, True, True)
    if SELECT == 2:  # noqa: SIM102
        if last_program(ticket_ptr, nprog):
            if KEY_SHIFT == 16:  # the float32 window: its lowest key and its end (state_ptr + 3)
                lo, hi = f32_window_keys(hist_ptr, k, W)
                tl.store(state_ptr + 3, hi.to(tl.int64))
            else:
                lo = window_lowest_key(hist_ptr, k, W, True)
            tl.debug_barrier()  # every thread has read the bins before any is zeroed
            tl.store(hist_ptr + ar, tl.zeros([256], dtype=tl.int64))
            tl.store(hist_ptr + 256 + tl.arange(0, 128), tl.zeros([128], dtype=tl.int64))
            tl.store(state_ptr, lo.to(tl.int64))


MAX_TENSORS = 8  # tensors per histogram launch


def tensor_slots(
    flats: list[torch.Tensor], max_iters: int | None = None, programs: int | None = None, block: int = BLOCK
) -> tuple[tuple, int, int]:
    """The launch arguments that spread up to ``MAX_TENSORS`` flat tensors over one grid of
    ``BLOCK``-value blocks (the kernels' x0..x7, n0..n7, s1..s7: unused slots hold no values and
    start past every block), the number of programs and the blocks each program reads (at most
    ``max_iters`` where given: more programs then; ``programs`` asks for a number of programs).
    ``block``: values a block spans (a sampled pass: ``BLOCK * sample``)."""
    if not 1 <= len(flats) <= MAX_TENSORS:
        raise ValueError(f"one launch takes 1..{MAX_TENSORS} tensors, got {len(flats)}")
    sizes = [f.numel() for f in flats]
    blocks = [triton.cdiv(n, block) for n in sizes]
    total = sum(blocks)
    starts = [sum(blocks[:i]) for i in range(1, len(flats))]
    pad = MAX_TENSORS - len(flats)
    ptrs = list(flats) + [flats[0]] * pad
    sizes += [0] * pad
    starts += [total + 1] * pad  # past every block: never selected
    programs = max(1, min(total, _MAX_PROGRAMS if programs is None else programs))
    if max_iters is not None:
        programs = max(programs, triton.cdiv(total, max_iters))
    return (*ptrs, *sizes, *starts), programs, triton.cdiv(total, programs)


def hist16_launch(
    flats16: list[torch.Tensor],
    hist: torch.Tensor,
    k: int,
    pass_: int,
    sample: int = 1,
    flag: torch.Tensor | None = None,
    programs: int | None = None,
    select: tuple[torch.Tensor, torch.Tensor, torch.dtype] | None = None,
    window_lo: tuple[torch.Tensor, torch.Tensor, int] | None = None,
    key_shift: int = 0,
) -> tuple:
    """(kernel, grid, every argument in signature order, warps) of one histogram pass over up to
    ``MAX_TENSORS`` flat int16 views, read in place: every value, or with ``sample`` > 1 one 16-value
    sector in every ``sample``; with ``flag`` (int64 [1]) the pass runs only where it holds 1.
    ``select`` = (state, ticket, dtype) (pass 2 only): its last program selects into ``state``
    as ``select16(hist, state, k, dtype, clear=True)`` (``ticket``: an int64 [1] of zero).
    ``window_lo`` = (lo, ticket, W) (pass 2 only): its last program writes into ``lo`` (int64 [1])
    the lowest key of the W-key window around rank k, and zeroes the bins. ``key_shift`` 16:
    ``flats16`` are int32 views of float32 tensors, keyed by the top 16 bits of |w|."""
    if sample not in SAMPLES:
        raise ValueError(f"sample must be one of {SAMPLES}, got {sample!r}")
    if (select is not None or window_lo is not None) and pass_ != 2:
        raise ValueError("only the second pass can select")
    if select is not None and window_lo is not None:
        raise ValueError("a pass selects the pivot or the window, not both")
    if key_shift not in (0, 16) or any(f.element_size() != (4 if key_shift else 2) for f in flats16):
        raise ValueError(f"key_shift 0 reads 16-bit views, 16 reads 32-bit views; got {key_shift!r}")
    slots, programs, iters = tensor_slots(flats16, programs=programs, block=BLOCK * sample)
    guard = hist if flag is None else flag
    state, ticket, dtype = select if select is not None else (hist, hist, torch.bfloat16)
    mode, w = (1 if select is not None else 0), WINDOW
    if window_lo is not None:
        state, ticket, w = window_lo
        mode = 2
    consts = (pass_, BLOCK, sample, flag is not None, mode, dtype == torch.bfloat16, w, key_shift, False)  # PDL off
    return _hist16_kernel, (programs,), (*slots, hist, k, iters, guard, state, ticket, *consts), 8


def select16_launch(counts: torch.Tensor, state: torch.Tensor, k: int, dtype: torch.dtype, clear: bool) -> tuple:
    """(kernel, grid, every argument in signature order, warps) of the device select."""
    if counts.dtype != torch.int64 or counts.numel() < COUNTS_LEN or not counts.is_contiguous():
        raise ValueError(f"counts must be a contiguous int64 tensor of {COUNTS_LEN} values")
    if state.dtype != torch.float32 or state.numel() < 2 or counts.device != state.device:
        raise ValueError("state must be a float32 tensor of 2 values on the device of counts")
    if dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"the 16-bit select needs bf16 or fp16, got {dtype}")
    return _select16_kernel, (1,), (counts, state, k, counts, dtype == torch.bfloat16, clear, False, False), 4


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
def last_program(ticket_ptr, nprog):
    # True in the last program of the grid to get here (its atomics, and every other program's,
    # are then visible: the ticket is acq_rel and each program's threads sync before taking it),
    # which also puts the ticket back to 0 for the next launch
    tl.debug_barrier()
    ticket = tl.atomic_add(ticket_ptr, 1)
    last = ticket == nprog - 1
    if last:
        tl.store(ticket_ptr, 0)
    return last


@triton.jit
def rank_in_hist(hist_ptr, k, VOLATILE: tl.constexpr = False):
    # the 15 magnitude bits of the k-th largest value, #(above it) and #(equal to it), from the two
    # histograms at hist_ptr (the host's _select_from_counts); VOLATILE: read past the L1 (bins
    # other programs of this launch added to)
    ar = tl.arange(0, 256)
    # bucket: walking the high bins from the top, the first whose running count reaches k
    rev = tl.load(hist_ptr + 255 - ar, volatile=VOLATILE)
    cum = tl.cumsum(rev, 0)
    i_hi = tl.min(tl.where(cum >= k, ar, 256), 0)  # 256: not reached (the host loop ends at 0)
    above = tl.sum(tl.where(ar < i_hi, rev, 0), 0)
    bucket = 255 - tl.minimum(i_hi, 255)
    ar2 = tl.arange(0, 128)
    rlo = tl.load(hist_ptr + 256 + 127 - ar2, volatile=VOLATILE)
    cum2 = above + tl.cumsum(rlo, 0)
    i_lo = tl.min(tl.where(cum2 >= k, ar2, 128), 0)
    gt = above + tl.sum(tl.where(ar2 < i_lo, rlo, 0), 0)
    low = 127 - tl.minimum(i_lo, 127)
    eq = tl.sum(tl.where(ar2 == tl.minimum(i_lo, 127), rlo, 0), 0)
    return (bucket << 7) | low, gt, eq


@triton.jit
def pivot_and_share(bits, gt, eq, k, IS_BF16: tl.constexpr):
    # the float32 pivot of magnitude bits, and the tie share as the host computes it: a float64
    # quotient (k - gt, eq exact in float64), then clamped; k == 0 keeps nothing (+inf, share 1)
    if IS_BF16:  # bf16 is the top half of a float32
        pivot = (bits.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        pivot = bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    share = (k - gt).to(tl.float64) / tl.maximum(eq, 1).to(tl.float64)
    share = tl.minimum(tl.maximum(share, 0.0), 1.0)
    share = tl.where(eq > 0, share, 1.0)
    pivot = tl.where(k > 0, pivot, float("inf"))
    share = tl.where(k > 0, share, 1.0)
    return pivot, share.to(tl.float32)


@triton.jit
def _select16(hist_ptr, state_ptr, k, IS_BF16: tl.constexpr, CLEAR: tl.constexpr, VOLATILE: tl.constexpr):
    # the host's _select_from_counts and _nonfinite_from_high, on the device, in one program
    ar = tl.arange(0, 256)
    hi = tl.load(hist_ptr + ar, volatile=VOLATILE)
    first = (0x7F80 >> 7) if IS_BF16 else (0x7C00 >> 7)  # high bytes of Inf / NaN magnitudes
    nonfinite = tl.sum(tl.where(ar >= first, hi, 0), 0)
    bits, gt, eq = rank_in_hist(hist_ptr, k, VOLATILE)
    pivot, share = pivot_and_share(bits, gt, eq, k, IS_BF16)
    ar2 = tl.arange(0, 128)
    if CLEAR:  # leave zeroed bins for the next call (saves a memset launch)
        tl.debug_barrier()  # every thread has read the bins before any is zeroed
        tl.store(hist_ptr + ar, tl.zeros([256], dtype=tl.int64))
        tl.store(hist_ptr + 256 + ar2, tl.zeros([128], dtype=tl.int64))
    tl.store(state_ptr, pivot)
    tl.store(state_ptr + 1, share)
    tl.store(hist_ptr + 384, nonfinite.to(tl.int64))
    tl.store(hist_ptr + 385, gt.to(tl.int64))
    tl.store(hist_ptr + 386, eq.to(tl.int64))


@triton.jit
def _select16_kernel(
    hist_ptr, state_ptr, k, flag_ptr, IS_BF16: tl.constexpr, CLEAR: tl.constexpr, GUARDED: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    # one program: _select16; GUARDED: only where flag_ptr holds 1 (the window pivot missed),
    # else it writes nothing
    chain_prologue(PDL)
    run = tl.full([], 1, tl.int32)
    if GUARDED:
        run = tl.load(flag_ptr).to(tl.int32)
    if run != 0:
        _select16(hist_ptr, state_ptr, k, IS_BF16, CLEAR, False)


def select16(counts: torch.Tensor, state: torch.Tensor, k: int, dtype: torch.dtype, clear: bool = False) -> None:
    """Select on the device from ``counts`` (int64 [COUNTS_LEN], bins filled by both passes):
    ``state`` (float32 [2]) <- (pivot, tie share); counts[NONFINITE, GT, EQ] <- the non-finite
    count, #(|w| > pivot), #(|w| == pivot). ``clear`` zeroes the 384 bins after reading them."""
    kernel, grid, args, warps = select16_launch(counts, state, k, dtype, clear)
    kernel[grid](*args, num_warps=warps)


# -- the window pivot: a sample places an 8-key window, one counting pass finds rank k in it -----
#
# The two histogram passes above are bound by tl.histogram (one shared-memory atomic a value:
# 77 + 67 us on a MAP-NEO 460M block where a pass that only counts takes 14-21 us;
# results/tuning/h100_probe_hist16.txt, h100_probe_hist_mma.txt). Weights are many and smooth, so
# the k-th largest key of a 1/32 sample (one 16-value sector in every 32, the same two passes on
# it) lies within a key or two of the exact one; the sample's last program writes the window's
# lowest key. One counting pass then counts, exactly and with no atomics per value, the values
# above an 8-key window around it (``WINDOW``; 16 possible) and the values of each key in it
# (``_window_pairs_kernel``: two values a word, packed counters; ``_window_kernel`` for odd
# sizes). Where rank k falls in the window and no value is non-finite (the select kernel checks
# it) that gives the exact pivot, #(above), #(equal); where it does not (a sample far off,
# k == 0, a NaN), a flag runs the two exact passes and ``_select16_kernel``, which otherwise
# launch and read nothing. Either way the result is bit for bit the two-pass select's; the launches are the
# same every call (a CUDA graph captures them). H100 numbers: docs/methods.md, "The window pivot".

WINDOW = 8  # keys counted one by one around the sample's pivot (8 or 16)
WINDOW_SAMPLE = 32  # the sample: one 16-value sector in every 32
WINDOW_MIN_VALUES = 1 << 20  # below this the two passes are cheap enough: no window
SAMPLE_AT = COUNTS_LEN  # the sample's 384 bins, after the two-pass counts
WIN_AT = SAMPLE_AT + HIST_LEN  # WINDOW counts, #(above the window), #(non-finite), the miss flag
FLAG_AT = WIN_AT + 18  # after up to 16 window counts, #(above the window), #(non-finite)
TICKETS_AT = FLAG_AT + 1  # tickets: the counting pass's, the guarded second pass's, the sample's
LO_AT = TICKETS_AT + 3  # the window's lowest key (written by the sample's second pass)
WINDOW_COUNTS_LEN = LO_AT + 1
_MAX_WINDOW_ITERS = 255  # blocks a window program reads: its 8-bit counters never carry
_MAX_PAIR_ITERS = 126  # blocks a pair-counting program reads: 18 flushes of 7 (8-bit fields)
WINDOW_SAMPLE_PROGRAMS = 1024  # grid of the sample's passes (at most; one block of theirs spans 32)
WINDOW_COUNT_WARPS = 4
WINDOW_FALLBACK_PROGRAMS = 1024  # grid of the guarded exact passes (idle unless the window missed)


@triton.jit
def window_lowest_key(sample_ptr, ks, WINDOW: tl.constexpr, VOLATILE: tl.constexpr = False):
    # the lowest key of the window: the sample's ks-th largest key near the window's middle
    bits, gt, eq = rank_in_hist(sample_ptr, ks, VOLATILE)
    return tl.minimum(tl.maximum(bits - (WINDOW // 2 - 1), 0), 0x8000 - WINDOW)


@triton.jit
def f32_window_keys(sample_ptr, ks, WINDOW: tl.constexpr):
    # the float32 window's keys lo .. hi - 1 from the sample's bins (n_s values): WINDOW keys
    # around its ks-th largest key; but where rank ks lies among the sample's zeros (exponent 0)
    # or its n_s / 64 smallest nonzero values (a trainer that re-applies its masks prunes to exact
    # zeros and puts rank k at their edge), from key 0 to the end of the highest exponent below
    # which the sample holds at most n_s / 32 nonzero values (1/32 of the values: half the
    # buffer), so that the window holds both sides of that edge (its zeros counted, not copied)
    lo = window_lowest_key(sample_ptr, ks, WINDOW, True)
    hi = lo + WINDOW
    ar = tl.arange(0, 256)
    bins = tl.load(sample_ptr + ar, volatile=True)  # by exponent, from 0
    budget = tl.sum(bins, 0) // 32  # n_s // 32
    below = tl.cumsum(tl.where(ar > 0, bins, 0), 0)  # nonzero values of exponent <= e
    top = tl.max(tl.where(below <= budget, ar, 0), 0)
    cliff = ks > tl.max(below, 0) - budget // 2  # below[255]: every nonzero value
    lo = tl.where(cliff, 0, lo)
    hi = tl.where(cliff, (top + 1) * 128, hi)
    return lo, hi


@triton.jit
def _window_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    lo_ptr, win_ptr, iters, hist_ptr, state_ptr, k,
    INF_KEY: tl.constexpr, BLOCK: tl.constexpr, W: tl.constexpr,
    SELECT: tl.constexpr = False, IS_BF16: tl.constexpr = True, PDL: tl.constexpr = False,
):  # fmt: skip
    # per program: counts of keys lo .. lo + W - 1 (lo at lo_ptr; W = 8 or 16: one or two int64
    # accumulators of eight 8-bit counters a lane; a lane sees at most iters <= 255 values),
    # #(key > lo + W - 1) at win_ptr + 16, #(key >= INF_KEY) at win_ptr + 17. Any tensor sizes and
    # alignments (_window_pairs_kernel is the fast one, for even sizes). SELECT: the last program
    # to finish (the ticket at win_ptr + 19) runs _select_window, so the select needs no launch of
    # its own (off by default: it slowed this pass, results/tuning/h100_probe_masker_launches.txt).
    chain_prologue(PDL)
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    lo = tl.load(lo_ptr).to(tl.int32)
    acc_a = tl.zeros([BLOCK], dtype=tl.int64)  # keys lo .. lo + 7
    acc_b = tl.zeros([BLOCK], dtype=tl.int64)  # keys lo + 8 .. lo + 15 (W == 16)
    above = tl.zeros([BLOCK], dtype=tl.int32)
    nonfinite = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(iters):
        g = i * nprog + pid  # global block
        x, n, start = block_slot(
            g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
        )
        offs = block_offsets(g, start, BLOCK, 1)
        m = offs < n
        key = tl.where(m, tl.load(x + offs, mask=m, other=0).to(tl.int32) & 0x7FFF, -1)
        d = key - lo
        above += (d >= W).to(tl.int32)
        nonfinite += (key >= INF_KEY).to(tl.int32)
        one = tl.full([BLOCK], 1, tl.int64) << ((d & 7) * 8).to(tl.int64)
        acc_a += tl.where((d >= 0) & (d < 8), one, 0)
        if W == 16:
            acc_b += tl.where((d >= 8) & (d < 16), one, 0)
    ar = tl.arange(0, W)
    win = tl.zeros([W], dtype=tl.int64)
    for f in tl.static_range(8):
        win += tl.where(ar == f, tl.sum((acc_a >> (8 * f)) & 0xFF, 0), 0)
        if W == 16:
            win += tl.where(ar == f + 8, tl.sum((acc_b >> (8 * f)) & 0xFF, 0), 0)
    tl.atomic_add(win_ptr + ar, win)
    tl.atomic_add(win_ptr + 16, tl.sum(above, 0).to(tl.int64))
    tl.atomic_add(win_ptr + 17, tl.sum(nonfinite, 0).to(tl.int64))
    if SELECT:  # noqa: SIM102 (a constexpr branch; the inner one is a runtime branch)
        if last_program(win_ptr + 19, nprog):
            _select_window(lo_ptr, win_ptr, hist_ptr, state_ptr, k, IS_BF16, W, True)


@triton.jit
def _window_pairs_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    lo_ptr, win_ptr, iters, hist_ptr, state_ptr, k,
    INF_KEY: tl.constexpr, BLOCK: tl.constexpr,
    SELECT: tl.constexpr = False, IS_BF16: tl.constexpr = True, PDL: tl.constexpr = False,
):  # fmt: skip
    # _window_kernel's counts for an 8-key window over int32 words of two 16-bit values each
    # (xi: ni words), with SWAR arithmetic on both halves of a word at once (about 13 integer
    # instructions a value, loop included, against 24; static SASS for sm_90): per half
    # u = (key + 0x8000 - lo) ^ 0x8000 is key - lo where key >= lo (no carry between halves)
    # and >= 0x8000 below the window, so
    #   below the window:  bit 15 of u (counted per half, both halves in one add);
    #   in the window:     u < 8, counted in 4-bit fields of an int32 (bin u: bits 4u..4u+3),
    #                      flushed every 7 blocks (a field gets at most 2 a block) into 8-bit
    #                      fields of two int32 (even bins, odd bins; at most 126 blocks a program);
    #   above the window:  what is neither (the program's values minus both);
    #   non-finite:        bit 15 of key + 0x8000 - INF_KEY, OR-ed: win_ptr + 17 holds the
    #                      number of programs that saw one, which the select takes as a miss
    #                      (the exact passes then count them).
    # Padding lanes read 0 (key 0): below the window, or in its bin 0 where lo == 0 (taken out).
    # SELECT: the last program runs _select_window (as _window_kernel's SELECT).
    chain_prologue(PDL)
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    lo = tl.load(lo_ptr).to(tl.int32)
    add_b = (0x8000 - lo) * 0x10001  # both halves: key + 0x8000 - lo (at most 0xFFFF: no carry)
    add_nf: tl.constexpr = (0x8000 - INF_KEY) * 0x10001
    acc_even = tl.zeros([BLOCK], dtype=tl.int32)  # bins 0, 2, 4, 6 in bytes 0..3
    acc_odd = tl.zeros([BLOCK], dtype=tl.int32)  # bins 1, 3, 5, 7
    below = tl.zeros([BLOCK], dtype=tl.int32)  # halves counted in bits 0..15 and 16..31
    nf = tl.zeros([BLOCK], dtype=tl.int32)
    pad = tl.zeros([], dtype=tl.int64)  # padding words read
    r = tl.arange(0, BLOCK)
    for c in range(0, iters, 7):  # 7 blocks, then a flush of the 4-bit fields
        acc4 = tl.zeros([BLOCK], dtype=tl.int32)
        for i in range(c, tl.minimum(c + 7, iters)):
            g = i * nprog + pid  # global block
            x, n, start = block_slot(
                g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
            )
            offs = (g - start) * BLOCK + r
            pad += tl.minimum(tl.maximum((g - start + 1) * BLOCK - n, 0), BLOCK)
            v = tl.load(x + offs, mask=offs < n, other=0) & 0x7FFF7FFF
            nf |= v + add_nf
            u = (v + add_b) ^ -0x7FFF8000  # 0x80008000 as an int32
            below += (u >> 15) & 0x10001
            in_lo = (u & 0xFFF8) == 0
            in_hi = (u & -0x80000) == 0  # 0xFFF80000
            acc4 += tl.where(in_lo, 1 << ((u & 7) * 4), 0) + tl.where(in_hi, 1 << ((u >> 14) & 28), 0)
        acc_even += acc4 & 0x0F0F0F0F
        acc_odd += (acc4 >> 4) & 0x0F0F0F0F
    ar = tl.arange(0, 8)
    win = tl.zeros([8], dtype=tl.int64)
    for f in tl.static_range(4):
        win += tl.where(ar == 2 * f, tl.sum((acc_even >> (8 * f)) & 0xFF, 0), 0)
        win += tl.where(ar == 2 * f + 1, tl.sum((acc_odd >> (8 * f)) & 0xFF, 0), 0)
    halves = 2 * iters * BLOCK  # values read, padding included
    n_below = tl.sum(below & 0xFFFF, 0).to(tl.int64) + tl.sum((below >> 16) & 0xFFFF, 0)
    win -= tl.where((ar == 0) & (lo == 0), 2 * pad, 0)  # padding read as key 0, in bin 0
    n_above = halves - n_below - tl.sum(win, 0) - tl.where(lo == 0, 2 * pad, 0)  # padding is never above
    tl.atomic_add(win_ptr + ar, win)
    tl.atomic_add(win_ptr + 16, n_above)
    nonfinite = tl.max((((nf >> 15) & 0x10001) != 0).to(tl.int32), 0).to(tl.int64)
    tl.atomic_add(win_ptr + 17, nonfinite)
    if SELECT:  # noqa: SIM102 (a constexpr branch; the inner one is a runtime branch)
        if last_program(win_ptr + 19, nprog):
            _select_window(lo_ptr, win_ptr, hist_ptr, state_ptr, k, IS_BF16, 8, True)


@triton.jit
def _select_window_kernel(
    lo_ptr, win_ptr, hist_ptr, state_ptr, k, IS_BF16: tl.constexpr, W: tl.constexpr, PDL: tl.constexpr = False
):
    # one program: _select_window (the counting pass's launch without SELECT)
    chain_prologue(PDL)
    _select_window(lo_ptr, win_ptr, hist_ptr, state_ptr, k, IS_BF16, W, False)


@triton.jit
def _select_window(
    lo_ptr, win_ptr, hist_ptr, state_ptr, k, IS_BF16: tl.constexpr, W: tl.constexpr, VOLATILE: tl.constexpr
):
    # rank k inside the window (and no non-finite value) gives pivot, share and counts (as
    # _select16_kernel); else the miss flag (win_ptr + 18) runs the guarded two-pass fallback,
    # which counts exactly. Clears the window's bins.
    lo = tl.load(lo_ptr).to(tl.int32)
    ar = tl.arange(0, W)
    rev = tl.load(win_ptr + W - 1 - ar, volatile=VOLATILE)  # from the top key down
    above = tl.load(win_ptr + 16, volatile=VOLATILE)
    nonfinite = tl.load(win_ptr + 17, volatile=VOLATILE)
    cum = above + tl.cumsum(rev, 0)
    i = tl.min(tl.where(cum >= k, ar, W), 0)
    hit = (above < k) & (i < W) & (nonfinite == 0)
    gt = above + tl.sum(tl.where(ar < i, rev, 0), 0)
    eq = tl.sum(tl.where(ar == i, rev, 0), 0)
    pivot, share = pivot_and_share(lo + W - 1 - i, gt, eq, k, IS_BF16)
    tl.debug_barrier()  # every thread has read the bins before any is zeroed
    tl.store(win_ptr + tl.arange(0, 32), tl.zeros([32], dtype=tl.int64), mask=tl.arange(0, 32) < 18)
    tl.store(win_ptr + 18, 1 - hit.to(tl.int64))
    if hit:
        tl.store(state_ptr, pivot)
        tl.store(state_ptr + 1, share)
        tl.store(hist_ptr + 384, nonfinite.to(tl.int64))
        tl.store(hist_ptr + 385, gt.to(tl.int64))
        tl.store(hist_ptr + 386, eq.to(tl.int64))


def default_count_programs(device: torch.device) -> int:
    """The counting pass's grid: two programs per SM (264 on an H100: 24.7% of the copy bandwidth on
    a MAP-NEO 460M block against 14.9% at 1024, results/tuning/h100_probe_window_pivot_sweep.txt)."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 264


def sampled_values(n: int, sample: int) -> int:
    """How many of ``n`` values a ``sample`` pass reads (``block_offsets``' layout: sector s % sample
    of span s, 16 values a sector)."""
    span = 16 * sample
    last, rem = divmod(n, span)
    return last * 16 + min(max(rem - (last % sample) * 16, 0), 16)


def pairable(flat: torch.Tensor) -> bool:
    """Whether a flat int16 view reads as whole int32 words (the pair-counting pass)."""
    return flat.numel() % 2 == 0 and flat.data_ptr() % 4 == 0


def window_pivot_launches(
    flats16: list[torch.Tensor],
    counts: torch.Tensor,
    state: torch.Tensor,
    k: int,
    dtype: torch.dtype,
    sample_programs: int = WINDOW_SAMPLE_PROGRAMS,
    count_programs: int | None = None,
    count_warps: int = WINDOW_COUNT_WARPS,
    fallback_programs: int | None = None,
    window: int = WINDOW,
    fuse_select: bool = True,
    fuse_window_select: bool = False,
    pairs_count: bool = True,
) -> list[tuple]:
    """(kernel, grid, arguments, warps) of every launch of the window pivot over the flat int16 views
    ``flats16`` (any number, read in place): the sample's two passes, the counting pass and its
    select, then the two exact passes and their select, which run only where the window missed
    rank k. ``fuse_select``: the exact passes' select runs in the last program of their second
    pass (a ticket), not as a launch of its own; ``fuse_window_select`` (off: it slowed the
    counting pass, results/tuning/h100_probe_masker_launches.txt) does the same for the window's
    select. Both need the tensors in one launch (at most ``MAX_TENSORS``; more: separate selects).
    ``pairs_count``: count with ``_window_pairs_kernel`` (two values a word) where every tensor has
    an even size and a 4-byte aligned start and the window has 8 keys; else ``_window_kernel``.
    ``sample_programs``: the sample's grid (at most; fewer where it has fewer blocks).
    ``counts``: int64 [WINDOW_COUNTS_LEN] of zeros (left zeroed but for NONFINITE, GT, EQ and the
    window's lowest key at LO_AT);
    ``state``: float32 [2] <- (pivot, tie share). Same results as the two passes and ``select16``.
    The grid sizes and warps are tuned on the H100 (scripts/probes/gpu_probe_window_pivot.py,
    gpu_probe_pair_count.py); ``count_programs`` defaults to two programs per SM (four for the
    pair-counting pass), ``fallback_programs`` to two."""
    if counts.dtype != torch.int64 or counts.numel() < WINDOW_COUNTS_LEN or not counts.is_contiguous():
        raise ValueError(f"counts must be a contiguous int64 tensor of {WINDOW_COUNTS_LEN} values")
    if state.dtype != torch.float32 or state.numel() < 2 or counts.device != state.device:
        raise ValueError("state must be a float32 tensor of 2 values on the device of counts")
    if dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"the 16-bit window pivot needs bf16 or fp16, got {dtype}")
    if window not in (8, 16):
        raise ValueError(f"window must be 8 or 16 keys, got {window!r}")
    flats = [f for f in flats16 if f.numel()]
    if not flats:
        raise ValueError("no values to select from")
    n = sum(f.numel() for f in flats)
    n_s = sum(sampled_values(f.numel(), WINDOW_SAMPLE) for f in flats)
    ks = min(n_s, max(1, round(k * n_s / n))) if k > 0 else 0
    groups = [flats[i : i + MAX_TENSORS] for i in range(0, len(flats), MAX_TENSORS)]
    fuse = fuse_select and len(groups) == 1
    fuse_window = fuse_window_select and len(groups) == 1
    grid = count_programs or default_count_programs(flats[0].device)
    fallback = fallback_programs or default_count_programs(flats[0].device)
    sample, win, flag = counts[SAMPLE_AT:WIN_AT], counts[WIN_AT:FLAG_AT], counts[FLAG_AT:]
    ticket, sample_ticket, lo = counts[TICKETS_AT + 1 :], counts[TICKETS_AT + 2 :], counts[LO_AT:]
    is_bf16 = dtype == torch.bfloat16
    inf_key = 0x7F80 if is_bf16 else 0x7C00
    out = [hist16_launch(g, sample, ks, 1, WINDOW_SAMPLE, programs=sample_programs) for g in groups]
    for i, g in enumerate(groups):  # the last group's last program writes the window's lowest key
        place = (lo, sample_ticket, window) if i == len(groups) - 1 else None
        out.append(hist16_launch(g, sample, ks, 2, WINDOW_SAMPLE, programs=sample_programs, window_lo=place))
    pairs = pairs_count and window == 8 and all(pairable(f) for f in flats)
    for g in groups:
        if pairs:  # four programs an SM by default (results/tuning/h100_probe_pair_count.txt)
            words = [f.view(torch.int32) for f in g]
            pair_grid = count_programs or 2 * grid
            slots, programs, iters = tensor_slots(words, _MAX_PAIR_ITERS, pair_grid, BLOCK // 2)
            args = (*slots, lo, win, iters, counts, state, k, inf_key, BLOCK // 2, fuse_window, is_bf16, False)  # PDL
            out.append((_window_pairs_kernel, (programs,), args, count_warps))
            continue
        slots, programs, iters = tensor_slots(g, max_iters=_MAX_WINDOW_ITERS, programs=grid)
        consts = (inf_key, BLOCK, window, fuse_window, is_bf16, False)  # PDL off
        out.append((_window_kernel, (programs,), (*slots, lo, win, iters, counts, state, k, *consts), count_warps))
    if not fuse_window:
        out.append((_select_window_kernel, (1,), (lo, win, counts, state, k, is_bf16, window, False), 4))
    for p in (1, 2):
        sel = (state, ticket, dtype) if p == 2 and fuse else None
        out += [hist16_launch(g, counts, k, p, flag=flag, programs=fallback, select=sel) for g in groups]
    if not fuse:
        out.append((_select16_kernel, (1,), (counts, state, k, flag, is_bf16, True, True, False), 4))
    return out


def window_pivot(
    tensors: list[torch.Tensor],
    k: int,
    window: int = WINDOW,
    fuse_select: bool = True,
    fuse_window_select: bool = False,
    pairs_count: bool = True,
    count_programs: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The window pivot of the k-th largest |w| over 16-bit ``tensors``: (state [pivot, tie share],
    counts [WINDOW_COUNTS_LEN]); a test and benchmark entry point (``FlexMasker`` keeps the launches)."""
    dev = tensors[0].device
    counts = torch.zeros(WINDOW_COUNTS_LEN, dtype=torch.int64, device=dev)
    state = torch.full((2,), float("nan"), device=dev)
    flats = [t.reshape(-1).view(torch.int16) for t in tensors]
    launches = window_pivot_launches(
        flats, counts, state, k, tensors[0].dtype, window=window, fuse_select=fuse_select,
        fuse_window_select=fuse_window_select, pairs_count=pairs_count, count_programs=count_programs,
    )  # fmt: skip
    for kernel, grid, args, warps in launches:
        kernel[grid](*args, num_warps=warps)
    return state, counts
