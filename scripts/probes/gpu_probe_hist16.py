# ruff: noqa: E501
"""Probe (not a suite): what a Triton histogram pass over one MAP-NEO 460M block (7 bf16 weights,
27 MB) costs, and why. Variants: one flat buffer (plain pointer, the compiler knows its
alignment), seven pointer arguments chosen per program (each specialised), and a count-only
streaming pass (the floor of any pass); bins 16..256, tl.histogram vs per-bin reductions."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402
from repro.roofline import measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
ws = [
    (0.02 * torch.randn(o, i, device=dev, generator=gen)).to(torch.bfloat16)
    for _, o, i in block_linear_shapes(CONFIGS["map-neo-460m"])
]
flat = torch.cat([w.reshape(-1) for w in ws])
n = flat.numel()
COPY = measure_ceilings(dev).copy_gbps
print(f"copy {COPY:.0f} GB/s; {n / 1e6:.2f}M values")


def report(name: str, ms: float, ok: bool = True) -> None:
    gb = 2 * n / (ms * 1e-3) / 1e9
    print(f"{name:64s} {ms * 1e3:8.1f} us {100 * gb / COPY:6.1f}% of copy {'ok' if ok else 'WRONG'}")


@triton.jit
def _flat_hist(x_ptr, n, hist_ptr, SHIFT: tl.constexpr, BITS: tl.constexpr, BLOCK: tl.constexpr, MODE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m, other=0).to(tl.int32) & 0x7FFF
    b = (v >> SHIFT) & ((1 << BITS) - 1)
    ar = tl.arange(0, 1 << BITS)
    if MODE == 0:
        h = tl.histogram(b, 1 << BITS)
        h = h - tl.where(ar == 0, BLOCK - tl.sum(m.to(tl.int32), 0), 0)
        tl.atomic_add(hist_ptr + ar, h, sem="relaxed")
    elif MODE == 1:  # per-bin reductions
        for i in tl.static_range(1 << BITS):
            c = tl.sum(((b == i) & m).to(tl.int32), 0)
            tl.atomic_add(hist_ptr + i, c, sem="relaxed")
    else:  # count-only streaming floor
        c = tl.sum(((v > 0x3C00) & m).to(tl.int32), 0)
        tl.atomic_add(hist_ptr, c, sem="relaxed")


@triton.jit
def _args_hist(
    w0,
    w1,
    w2,
    w3,
    w4,
    w5,
    w6,
    s0,
    s1,
    s2,
    s3,
    s4,
    s5,
    s6,
    b1,
    b2,
    b3,
    b4,
    b5,
    b6,
    hist_ptr,
    SHIFT: tl.constexpr,
    BITS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    base = w0
    size = s0
    start = 0
    if pid >= b1:
        base = w1
        size = s1
        start = b1
    if pid >= b2:
        base = w2
        size = s2
        start = b2
    if pid >= b3:
        base = w3
        size = s3
        start = b3
    if pid >= b4:
        base = w4
        size = s4
        start = b4
    if pid >= b5:
        base = w5
        size = s5
        start = b5
    if pid >= b6:
        base = w6
        size = s6
        start = b6
    offs = (pid - start).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < size
    v = tl.load(base + offs, mask=m, other=0).to(tl.int32) & 0x7FFF
    b = (v >> SHIFT) & ((1 << BITS) - 1)
    ar = tl.arange(0, 1 << BITS)
    h = tl.histogram(b, 1 << BITS)
    h = h - tl.where(ar == 0, BLOCK - tl.sum(m.to(tl.int32), 0), 0)
    tl.atomic_add(hist_ptr + ar, h, sem="relaxed")


def want(bits: int) -> torch.Tensor:
    return torch.bincount(((flat.view(torch.int16).int() & 0x7FFF) >> (15 - bits)), minlength=1 << bits).cpu()


f16 = flat.view(torch.int16)
for bits in (4, 5, 6, 8):
    ref = want(bits)
    for block in (4096, 8192, 16384):
        for warps in (4, 8, 16):
            for mode in (0, 1) if bits <= 5 else (0,):
                hist = torch.zeros(1 << bits, dtype=torch.int32, device=dev)
                grid = (triton.cdiv(n, block),)

                def call(hist=hist, grid=grid, block=block, warps=warps, mode=mode, bits=bits):
                    _flat_hist[grid](f16, n, hist, 15 - bits, bits, block, mode, num_warps=warps)

                call()
                torch.cuda.synchronize()
                hist.zero_()
                call()
                ok = torch.equal(hist.long().cpu(), ref)
                report(
                    f"flat {'histogram' if mode == 0 else 'per-bin sums'} {1 << bits:3d} bins BLOCK={block} warps={warps}",
                    time_gpu(call).ms,
                    ok,
                )
hist = torch.zeros(1, dtype=torch.int32, device=dev)
for block in (4096, 8192, 16384):
    for warps in (4, 8):
        report(
            f"flat count-only BLOCK={block} warps={warps}",
            time_gpu(
                lambda b=block, w=warps: _flat_hist[(triton.cdiv(n, b),)](f16, n, hist, 0, 1, b, 2, num_warps=w)
            ).ms,
        )
report("torch (f16 > 0x3C00).sum()", time_gpu(lambda: ((f16 & 0x7FFF) > 0x3C00).sum()).ms)

w16 = [w.view(torch.int16) for w in ws]
for bits in (5, 8):
    ref = want(bits)
    for block in (4096, 8192):
        for warps in (4, 8):
            sizes = [w.numel() for w in ws]
            blocks = [triton.cdiv(s, block) for s in sizes]
            starts = [sum(blocks[:i]) for i in range(1, len(ws))]
            hist = torch.zeros(1 << bits, dtype=torch.int32, device=dev)

            def call(hist=hist, blocks=blocks, starts=starts, sizes=sizes, block=block, warps=warps, bits=bits):
                _args_hist[(sum(blocks),)](*w16, *sizes, *starts, hist, 15 - bits, bits, block, num_warps=warps)

            call()
            torch.cuda.synchronize()
            hist.zero_()
            call()
            ok = torch.equal(hist.long().cpu(), ref)
            report(f"7 pointer args histogram {1 << bits:3d} bins BLOCK={block} warps={warps}", time_gpu(call).ms, ok)
