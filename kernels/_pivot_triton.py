"""Triton two-pass histogram select of the k-th largest |w| of 16-bit weights (bf16 / fp16).

A non-negative 16-bit float orders like its 15 magnitude bits, so rank k is found exactly by two
histograms: 256 bins of the high 8 bits (pass 1), then 128 bins of the low 7 bits among the values
in the bucket that holds rank k (pass 2; each program finds that bucket itself from pass 1's
histogram, so the passes run back to back with no host round trip). Each program accumulates
``tl.histogram`` over many blocks in registers and adds it to the global counts once. The caller
reads the 384 counts back in one copy (``kernels.pivot.pivot_and_tie_16bit``); the reference is
the same select written with ``torch.bincount`` (``pivot_and_tie_16bit_reference``)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

HIST_LEN = 384  # 256 high-byte bins, then 128 low-bit bins
_BLOCK = 4096
_MAX_PROGRAMS = 1024


@triton.jit
def _hist16_kernel(x_ptr, n, hist_ptr, k, iters, PASS: tl.constexpr, BLOCK: tl.constexpr):
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
    acc = tl.zeros([512], dtype=tl.int32)
    for i in range(iters):
        offs = (i * nprog + pid) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(x_ptr + offs, mask=m, other=0).to(tl.int32) & 0x7FFF
        if PASS == 1:  # noqa: SIM108 (a constexpr branch inside a Triton kernel)
            b = tl.where(m, v >> 7, 256)
        else:
            b = tl.where(m & ((v >> 7) == bucket), v & 0x7F, 256)
        acc += tl.histogram(b, 512)
    ar2 = tl.arange(0, 512)
    if PASS == 1:
        tl.atomic_add(hist_ptr + ar2, acc.to(tl.int64), mask=ar2 < 256)
    else:
        tl.atomic_add(hist_ptr + 256 + ar2, acc.to(tl.int64), mask=ar2 < 128)


def _launch(flat16: torch.Tensor, hist: torch.Tensor, k: int, pass_: int) -> None:
    n = flat16.numel()
    blocks = triton.cdiv(n, _BLOCK)
    programs = max(1, min(blocks, _MAX_PROGRAMS))
    iters = triton.cdiv(blocks, programs)
    _hist16_kernel[(programs,)](flat16, n, hist, k, iters, PASS=pass_, BLOCK=_BLOCK, num_warps=8)


def hist16_counts(tensors: list[torch.Tensor], k: int, cat_limit: int = 1 << 29) -> torch.Tensor:
    """Both passes over ``tensors`` (one dtype, one device); returns the 384 counts on the device.

    Several tensors are concatenated first when they hold at most ``cat_limit`` values (one copy
    and two launches beat two launches per tensor), else processed one by one."""
    dev = tensors[0].device
    hist = torch.zeros(HIST_LEN, dtype=torch.int64, device=dev)
    flats = [t.reshape(-1).view(torch.int16) for t in tensors]
    if len(flats) > 1 and sum(f.numel() for f in flats) <= cat_limit:
        flats = [torch.cat(flats)]
    for pass_ in (1, 2):
        for f in flats:
            if f.numel():
                _launch(f, hist, k, pass_)
    return hist
