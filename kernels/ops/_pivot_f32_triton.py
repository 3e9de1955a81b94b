"""Triton window pivot of the k-th largest |w| of float32 weights (a trainer's master weights).

Why: the four-pass radix select (``kernels.ops._pivot_radix_triton``) histograms every value four
times, and ``tl.histogram`` issues one shared-memory atomic a value; on MAP-NEO 460M's 168 float32
weights it took 7.2 ms of FlexMasker's 13.4 ms (results/tuning/h200_probe_fp32_train_masks_a92369f.txt).
|w| orders like its 31 magnitude bits, and its top 16 bits (the bf16-truncated key) order it
coarsely, so the 16-bit window pivot's idea carries over (``kernels.ops._pivot_triton``):

1. the 16-bit sample passes (``_hist16_kernel`` with ``KEY_SHIFT`` 16) place a ``WINDOW``-key window
   around the sample's rank k (1/32 of the values); where rank k lies at the edge of the exact
   zeros (a trainer that re-applies its masks prunes to exact zeros, so rank k sits between them
   and the smallest kept value: a fixed window missed there at every step,
   results/tuning/h200_probe_train_step_masks_d27c9c7.txt) the window runs from key 0 over the
   smallest nonzero values, about 1/32 of them at most (``f32_window_keys``);
2. one pass over every value (``_window_compact_kernel``) counts the values above the window, the
   non-finite ones, and copies the nonzero magnitudes inside it into a buffer (1.55%
   of the values at initialisation, 0.28% in the trainer's regime: results/tuning/cpu_probe_f32_window_pivot.txt);
   the zeros are not copied (half the values at density 0.5): where the window starts at key 0
   the hit kernel takes them as n - above - copied, and the radix passes add them to their bin 0;
3. a one-program select (``_window_hit_kernel``) decides: where rank k falls in the window, the
   buffer fits and nothing is non-finite, the radix passes run over the buffer alone with rank
   k - #(above); else (a miss) over every value with rank k, as the radix select does today;
4. the radix select adds #(above) back: pivot, tie share, #(|w| > pivot), #(|w| == pivot).

Values equal to the pivot share its key, so they are all in the buffer: the result is the radix
select's, bit for bit, hit or miss. The launches are the same every call (a CUDA graph captures
them); the passes of the branch not taken read one flag and exit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops._pivot_radix_triton import COUNTS_LEN as RADIX_COUNTS_LEN
from kernels.ops._pivot_radix_triton import PASSES, radix_guarded_launch, radix_select_launch
from kernels.ops._pivot_triton import (
    BLOCK,
    HIST_LEN,
    MAX_TENSORS,
    WINDOW,
    WINDOW_SAMPLE,
    WINDOW_SAMPLE_PROGRAMS,
    block_slot,
    hist16_launch,
    sampled_values,
    tensor_slots,
)

SAMPLE_AT = RADIX_COUNTS_LEN  # the sample's 384 bins, after the radix bins and NONFINITE, GT, EQ
CTL_AT = SAMPLE_AT + HIST_LEN  # the control words below, relative to CTL_AT
# HI must stay LO + 3: the sample's last program writes lo and hi through one pointer (_hist16_kernel);
# RESERVED is unused (the hit kernel derives the zeros) and keeps that gap
MISSED, K_EFF, BASE, N_COMPACT, ABOVE, COUNT, NONFINITE_SEEN, LO, SAMPLE_TICKET, RESERVED, HI, ZEROS_IN = range(12)
F32_WINDOW_COUNTS_LEN = CTL_AT + 12
F32_WINDOW_MIN_VALUES = 1 << 20  # below this the radix passes are cheap enough: no window


COMPACT_BLOCK = 1024  # the compacting pass's block, warps and programs an SM: the fastest of six
COMPACT_WARPS = 4  # settings on an H200 (2.07 ms for the 460M model's window pivot against 2.74 at
COMPACT_PROGRAMS_PER_SM = 16  # 4096 / 8 / 2; results/tuning/h200_probe_fp32_train_masks_491bf07.txt)


def compact_programs(device: torch.device) -> int:
    """The compacting pass's grid: ``COMPACT_PROGRAMS_PER_SM`` programs an SM (132 SMs off a GPU)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132
    return COMPACT_PROGRAMS_PER_SM * sms


def compact_capacity(n: int) -> int:
    """Values the window's buffer holds: 1/16 of them (4x the 1.55% seen at initialisation);
    a window holding more counts as a miss."""
    return max(BLOCK, -(-n // 16))


@triton.jit
def _window_compact_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    ctl_ptr, out_ptr, cap, iters, BLOCK: tl.constexpr, FIELD: tl.constexpr,
):  # fmt: skip
    # xi: int32 views of float32 tensors. Key = the top 16 bits of |w|; the window holds keys
    # lo .. hi - 1 (at ctl_ptr + LO, + HI). Each block's nonzero magnitudes inside the window go
    # to out_ptr at an offset taken by one atomic a block (ctl_ptr + COUNT: every one, also past
    # cap); #(key above the window) and #(non-finite) add to ctl_ptr + ABOVE and
    # + NONFINITE_SEEN (the zeros are not counted: where the window starts at key 0 every value is
    # above it, copied or zero, so _window_hit_kernel takes them as n - above - copied). A block's
    # three counts are one sum of FIELD-bit fields (int32 where 3 FIELD <= 31), not per-lane
    # counters carried through the loop: those raised it from 64 to 96 registers a thread, and so
    # cut the programs an SM (results/tuning/h200_probe_f32_compact_8ccb6a8.txt).
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    lo = tl.load(ctl_ptr + 7).to(tl.int32)  # LO
    hi = tl.load(ctl_ptr + 10).to(tl.int32)  # HI
    ACC: tl.constexpr = tl.int32 if 3 * FIELD <= 31 else tl.int64
    MASK: tl.constexpr = (1 << FIELD) - 1
    above = tl.zeros([], dtype=tl.int64)
    nonfinite = tl.zeros([], dtype=tl.int64)
    r = tl.arange(0, BLOCK)
    for i in range(iters):
        g = i * nprog + pid  # global block
        x, n, start = block_slot(
            g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
        )
        offs = (g - start) * BLOCK + r
        m = offs < n
        v = tl.load(x + offs, mask=m, other=0) & 0x7FFFFFFF
        key = v >> 16
        keep = m & (key >= lo) & (key < hi) & (v != 0)
        kk = keep.to(tl.int32)
        ab = (m & (key >= hi)).to(ACC) << FIELD
        nf = (v >= 0x7F800000).to(ACC) << (2 * FIELD)  # padding reads 0
        counts = tl.sum(kk.to(ACC) + ab + nf, 0)
        total = counts & MASK
        above += ((counts >> FIELD) & MASK).to(tl.int64)
        nonfinite += ((counts >> (2 * FIELD)) & MASK).to(tl.int64)
        if total > 0:
            base = tl.atomic_add(ctl_ptr + 5, total.to(tl.int64))  # COUNT
            at = base + tl.cumsum(kk, 0) - 1
            tl.store(out_ptr + at, v, mask=keep & (at < cap))
    tl.atomic_add(ctl_ptr + 4, above)  # ABOVE
    tl.atomic_add(ctl_ptr + 6, nonfinite)  # NONFINITE_SEEN


@triton.jit
def _window_hit_kernel(ctl_ptr, k, cap, n):
    # one program: hit where rank k is inside the window (its nonzero values, and its zeros where
    # it starts at key 0), the buffer held it and nothing is non-finite; writes MISSED, K_EFF,
    # BASE, N_COMPACT, ZEROS_IN (the zeros the radix passes add to their bin 0) and clears the
    # pass's counters
    above = tl.load(ctl_ptr + 4)
    count = tl.load(ctl_ptr + 5)
    nonfinite = tl.load(ctl_ptr + 6)
    zeros = tl.where(tl.load(ctl_ptr + 7) == 0, n - above - count, 0)  # LO == 0: no value below the window
    hit = (above < k) & (k <= above + count + zeros) & (count <= cap) & (nonfinite == 0)
    tl.store(ctl_ptr + 0, tl.where(hit, 0, 1).to(tl.int64))
    tl.store(ctl_ptr + 1, tl.where(hit, k - above, k).to(tl.int64))
    tl.store(ctl_ptr + 2, tl.where(hit, above, 0).to(tl.int64))
    tl.store(ctl_ptr + 3, tl.where(hit, count, 0).to(tl.int64))
    tl.store(ctl_ptr + 11, tl.where(hit, zeros, 0).to(tl.int64))
    tl.store(ctl_ptr + 4, tl.zeros([], dtype=tl.int64))
    tl.store(ctl_ptr + 5, tl.zeros([], dtype=tl.int64))
    tl.store(ctl_ptr + 6, tl.zeros([], dtype=tl.int64))


def f32_window_pivot_launches(
    flats: list[torch.Tensor],
    counts: torch.Tensor,
    compact: torch.Tensor,
    state: torch.Tensor,
    k: int,
    window: int = WINDOW,
    count_programs: int | None = None,
    count_block: int = COMPACT_BLOCK,
    count_warps: int = COMPACT_WARPS,
) -> list[tuple]:
    """(kernel, grid, arguments, warps) of every launch of the float32 window pivot over the flat
    float32 tensors ``flats`` (any number, read in place). ``counts``: int64 [F32_WINDOW_COUNTS_LEN]
    of zeros (left zeroed but for NONFINITE, GT, EQ at the radix select's places and the control
    words); ``compact``: float32 [compact_capacity(n)] scratch; ``state``: float32 [2] <- (pivot,
    tie share). Same results as ``radix_hist_passes`` + ``radix_select_launch``. The compacting
    pass: ``count_programs`` (default ``compact_programs``), blocks of ``count_block`` values (a
    power of two from 256), ``count_warps`` warps; the defaults are the fastest of six settings
    swept on an H200 (results/tuning/h200_probe_fp32_train_masks_491bf07.txt), within 2% of the
    fastest of five swept again in session 44 (results/tuning/h200_probe_f32_compact_8ccb6a8.txt)."""
    if counts.dtype != torch.int64 or counts.numel() < F32_WINDOW_COUNTS_LEN or not counts.is_contiguous():
        raise ValueError(f"counts must be a contiguous int64 tensor of {F32_WINDOW_COUNTS_LEN} values")
    if state.dtype != torch.float32 or state.numel() < 2 or counts.device != state.device:
        raise ValueError("state must be a float32 tensor of 2 values on the device of counts")
    flats = [f for f in flats if f.numel()]
    if not flats:
        raise ValueError("no values to select from")
    if any(f.dtype != torch.float32 or f.dim() != 1 or not f.is_contiguous() for f in flats):
        raise TypeError("flats must be flat contiguous float32 tensors")
    if window not in (8, 16):
        raise ValueError(f"window must be 8 or 16 keys, got {window!r}")
    if count_block < 256 or count_block & (count_block - 1):
        raise ValueError(f"count_block must be a power of two from 256, got {count_block!r}")
    n = sum(f.numel() for f in flats)
    cap = compact_capacity(n)
    if compact.dtype != torch.float32 or compact.numel() < cap or compact.device != counts.device:
        raise ValueError(f"compact must be a float32 tensor of at least {cap} values on the device of counts")
    n_s = sum(sampled_values(f.numel(), WINDOW_SAMPLE) for f in flats)
    ks = min(n_s, max(1, round(k * n_s / n))) if k > 0 else 0
    words = [f.view(torch.int32) for f in flats]
    groups = [words[i : i + MAX_TENSORS] for i in range(0, len(words), MAX_TENSORS)]
    fgroups = [flats[i : i + MAX_TENSORS] for i in range(0, len(flats), MAX_TENSORS)]
    sample, ctl = counts[SAMPLE_AT:CTL_AT], counts[CTL_AT:]
    lo, ticket = ctl[LO:], ctl[SAMPLE_TICKET:]
    kw = {"sample": WINDOW_SAMPLE, "programs": WINDOW_SAMPLE_PROGRAMS, "key_shift": 16}
    out = [hist16_launch(g, sample, ks, 1, **kw) for g in groups]
    for i, g in enumerate(groups):  # the last group's last program writes the window's lowest key
        place = (lo, ticket, window) if i == len(groups) - 1 else None
        out.append(hist16_launch(g, sample, ks, 2, window_lo=place, **kw))
    grid = count_programs or compact_programs(flats[0].device)
    buf = compact[:cap].view(torch.int32)
    for g in groups:
        slots, programs, iters = tensor_slots(g, programs=grid, block=count_block)
        args = (*slots, ctl, buf, cap, iters, count_block, count_block.bit_length())
        out.append((_window_compact_kernel, (programs,), args, count_warps))
    out.append((_window_hit_kernel, (1,), (ctl, k, cap, n), 1))
    for p in range(1, PASSES + 1):  # over the buffer where the window hit, else over every value
        out.append(radix_guarded_launch([compact[:cap]], counts, ctl, p, 2))
        out += [radix_guarded_launch(g, counts, ctl, p, 1) for g in fgroups]
    out.append(radix_select_launch(counts, state, k, True, ctl))
    return out


def f32_window_pivot(tensors: list[torch.Tensor], k: int, **kw: object) -> tuple[torch.Tensor, torch.Tensor]:
    """The float32 window pivot of the k-th largest |w| over ``tensors``: (state [pivot, tie share],
    counts [F32_WINDOW_COUNTS_LEN]); a test and benchmark entry point (``FlexMasker`` keeps the launches)."""
    dev = tensors[0].device
    flats = [t.detach().reshape(-1) for t in tensors]
    counts = torch.zeros(F32_WINDOW_COUNTS_LEN, dtype=torch.int64, device=dev)
    compact = torch.empty(compact_capacity(sum(f.numel() for f in flats)), dtype=torch.float32, device=dev)
    state = torch.full((2,), float("nan"), device=dev)
    for kernel, grid, args, warps in f32_window_pivot_launches(flats, counts, compact, state, k, **kw):
        kernel[grid](*args, num_warps=warps)
    return state, counts
