# ruff: noqa: E501
"""Probe (not a suite): can tensor cores take the histogram out of FAST's exact 16-bit pivot?

FAST's pivot (``kernels.ops._pivot_triton``) is two histogram passes over a block's weights (256
bins of the high byte, then 128 bins of the low bits inside the bucket of rank k). On the H100 a
``tl.histogram`` pass over the 27 MB of a MAP-NEO 460M block costs 57-77 us against 14 us for a
pass that only counts (results/tuning/h100_probe_hist16.txt, h100_probe_pivot_bracket.txt): the
histogram, not memory, bounds the pivot, and with it issue 20's 50%-of-copy target.

Here a 256-bin histogram of 8-bit keys is a 16 x 16 outer product summed over the values:
one-hot(key >> 4) [16, K] @ one-hot(key & 15) [K, 16] on the tensor cores (fp16 0/1 operands,
fp32 accumulator: exact while a program counts fewer than 2^24 values per bin), so each value
costs 32 compares and no shared-memory atomics. Values outside the pass (padding; in pass 2,
outside the bucket) get the row index 16, which matches no row. The kernel reads the same up to
8 tensors in place as the production kernel (its ``tensor_slots``) and writes the same 384
counts, so the production select (``select16``) finishes it.

A third variant is the pass a warm start would need: with the previous regeneration's pivot, one
pass counting the 256 keys around it (the same outer product) and the values above them finds
the exact pivot whenever rank k lies in that window (weights move little between regenerations),
leaving the two-pass select as the fallback.

Checks first: the counts equal the production kernel's (``hist16_counts``) and, in ``--smoke``
(CPU, ``TRITON_INTERPRET=1``), a ``torch.bincount`` reference, on normal and row-scaled weights
at densities 0.5 and 0.25. Then, on a GPU, device time (CUDA-graph replays, L2 flushed, median)
of each pass and of both passes + select, production vs MMA, per chunk size and warp count, on
a MAP-NEO 460M block and a 7B block.

    python3 scripts/probes/gpu_probe_hist_mma.py            # GPU
    TRITON_INTERPRET=1 python3 scripts/probes/gpu_probe_hist_mma.py --smoke   # CPU check only
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SMOKE = "--smoke" in sys.argv
if SMOKE:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops._pivot_triton import (  # noqa: E402
    BLOCK,
    COUNTS_LEN,
    HIST_LEN,
    block_slot,
    hist16_counts,
    hist16_launch,
    select16,
    tensor_slots,
)


@triton.jit
def _hist_mma_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    hist_ptr, k, iters, PASS: tl.constexpr, BLOCK: tl.constexpr, KC: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    ar16 = tl.arange(0, 16)
    if PASS == 2:  # the bucket of rank k, from pass 1's counts (as the production kernel)
        ar = tl.arange(0, 256)
        rev = tl.load(hist_ptr + 255 - ar)
        cum = tl.cumsum(rev, 0)
        bucket = 255 - tl.min(tl.where(cum >= k, ar, 256), 0)
    else:
        bucket = 0
    acc = tl.zeros([16, 16], dtype=tl.float32)
    for i in range(iters):
        g = i * nprog + pid
        x, n, start = block_slot(
            g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
        )
        for c in tl.static_range(BLOCK // KC):
            offs = (g - start) * BLOCK + c * KC + tl.arange(0, KC)
            m = offs < n
            v = tl.load(x + offs, mask=m, other=0).to(tl.int32) & 0x7FFF
            if PASS == 1:  # noqa: SIM108 (a constexpr branch inside a Triton kernel)
                key = v >> 7
                hi = tl.where(m, key >> 4, 16)
            else:
                key = v & 0x7F
                hi = tl.where(m & ((v >> 7) == bucket), key >> 4, 16)
            a = (ar16[:, None] == hi[None, :]).to(tl.float16)  # [16, KC]
            b = ((key & 15)[:, None] == ar16[None, :]).to(tl.float16)  # [KC, 16]
            acc += tl.dot(a, b)
    idx = ar16[:, None] * 16 + ar16[None, :]
    counts = acc.to(tl.int64)
    if PASS == 1:
        tl.atomic_add(hist_ptr + idx, counts)
    else:
        tl.atomic_add(hist_ptr + 256 + idx, counts, mask=idx < 128)


@triton.jit
def _window_mma_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    out_ptr, lo, iters, BLOCK: tl.constexpr, KC: tl.constexpr,
):  # fmt: skip
    # one pass, warm-started: the 256 keys [lo, lo + 256) counted on the tensor cores, and the
    # values above the window counted; rank k is inside the window iff above < k <= above + sum
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    ar16 = tl.arange(0, 16)
    acc = tl.zeros([16, 16], dtype=tl.float32)
    above = tl.zeros([KC], dtype=tl.int32)
    for i in range(iters):
        g = i * nprog + pid
        x, n, start = block_slot(
            g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
        )
        for c in tl.static_range(BLOCK // KC):
            offs = (g - start) * BLOCK + c * KC + tl.arange(0, KC)
            m = offs < n
            d = (tl.load(x + offs, mask=m, other=0).to(tl.int32) & 0x7FFF) - lo
            above += (m & (d >= 256)).to(tl.int32)
            hi = tl.where(m & (d >= 0) & (d < 256), d >> 4, 16)
            a = (ar16[:, None] == hi[None, :]).to(tl.float16)
            b = ((d & 15)[:, None] == ar16[None, :]).to(tl.float16)
            acc += tl.dot(a, b)
    tl.atomic_add(out_ptr + ar16[:, None] * 16 + ar16[None, :], acc.to(tl.int64))
    tl.atomic_add(out_ptr + 256, tl.sum(above, 0).to(tl.int64))


def window_mma_into(out: torch.Tensor, flats: list[torch.Tensor], lo: int, kc: int, warps: int) -> torch.Tensor:
    """Counts of the keys lo..lo+255 (out[:256]) and of the keys above them (out[256])."""
    slots, programs, iters = tensor_slots(flats)
    _window_mma_kernel[(programs,)](*slots, out, lo, iters, BLOCK, kc, num_warps=warps)
    return out


def window_reference(tensors: list[torch.Tensor], lo: int) -> torch.Tensor:
    d = torch.cat([t.reshape(-1).view(torch.int16).to(torch.int32).cpu() & 0x7FFF for t in tensors]) - lo
    inside = d[(d >= 0) & (d < 256)]
    return torch.cat([torch.bincount(inside, minlength=256), (d >= 256).sum().reshape(1)])


def pivot_key(tensors: list[torch.Tensor], k: int) -> int:
    """The 15-bit key of the k-th largest |w|, from the reference counts (no sort of the weights)."""
    counts = reference_counts(tensors, k)
    hi, lo = counts[:256], counts[256:]
    above = 0
    for bucket in range(255, -1, -1):
        if above + int(hi[bucket]) >= k:
            break
        above += int(hi[bucket])
    for low in range(127, -1, -1):
        above += int(lo[low])
        if above >= k:
            return (bucket << 7) | low
    raise AssertionError("rank k not found")


def hist_mma_counts(tensors: list[torch.Tensor], k: int, kc: int = 256, warps: int = 4, passes=(1, 2)) -> torch.Tensor:
    """Both passes (or the ``passes`` given) over up to 8 tensors; the 384 counts, as hist16_counts."""
    hist = torch.zeros(COUNTS_LEN, dtype=torch.int64, device=tensors[0].device)
    return hist_mma_into(hist, [t.reshape(-1).view(torch.int16) for t in tensors], k, kc, warps, passes)


def hist_mma_into(hist, flats, k, kc, warps, passes=(1, 2)):
    slots, programs, iters = tensor_slots(flats)
    for p in passes:
        _hist_mma_kernel[(programs,)](*slots, hist, k, iters, p, BLOCK, kc, num_warps=warps)
    return hist


def reference_counts(tensors: list[torch.Tensor], k: int) -> torch.Tensor:
    mags = [t.reshape(-1).view(torch.int16).to(torch.int32).cpu() & 0x7FFF for t in tensors]
    hi = sum(torch.bincount(m >> 7, minlength=256) for m in mags)
    rev = hi.flip(0).cumsum(0)
    bucket = 255 - int((rev >= k).nonzero()[0])
    lo = sum(torch.bincount(m[(m >> 7) == bucket] & 0x7F, minlength=128) for m in mags)
    return torch.cat([hi, lo])


def weights(shapes, kind: str, dev, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator(device=dev).manual_seed(seed)
    ws = []
    for o, i in shapes:
        w = 0.02 * torch.randn(o, i, device=dev, generator=gen)
        if kind == "rows":  # row and column scales, as trained layers have
            w = (
                w
                * torch.rand(o, 1, device=dev, generator=gen).add(0.25)
                * torch.rand(1, i, device=dev, generator=gen).add(0.5)
            )
        ws.append(w.to(torch.bfloat16))
    return ws


def check(ws: list[torch.Tensor], density: float, kcs=(128, 256, 512)) -> bool:
    n = sum(w.numel() for w in ws)
    k = round(density * n)
    want = reference_counts(ws, k)
    prod = hist16_counts(ws, k)[:HIST_LEN].cpu()
    ok = torch.equal(prod, want)
    for kc in kcs:
        got = hist_mma_counts(ws, k, kc)[:HIST_LEN].cpu()
        ok &= torch.equal(got, want)
    # the warm-started window, centred on the true pivot's key (a later regeneration's pivot
    # moves little): its counts, and that it holds rank k
    lo = max(pivot_key(ws, k) - 128, 0)
    wref = window_reference(ws, lo)
    flats = [w.reshape(-1).view(torch.int16) for w in ws]
    for kc in kcs:
        out = torch.zeros(257, dtype=torch.int64, device=ws[0].device)
        ok &= torch.equal(window_mma_into(out, flats, lo, kc, 4).cpu(), wref)
    ok &= int(wref[256]) < k <= int(wref.sum())
    return bool(ok)


def main() -> None:
    if SMOKE:
        shapes = [(64, 96), (32, 64), (96, 32), (8, 200)]  # blocks of 4096: several tensors per launch, ragged ends
        for kind in ("normal", "rows"):
            for density in (0.5, 0.25):
                ok = check(weights(shapes, kind, torch.device("cpu")), density, kcs=(128, 256))
                print(f"smoke {kind} density {density}: counts {'equal' if ok else 'DIFFER'}")
                assert ok
        return
    from repro.models.llama import CONFIGS, block_linear_shapes
    from repro.roofline import measure_ceilings

    dev = torch.device("cuda")
    copy = measure_ceilings(dev).copy_gbps
    print(f"{torch.cuda.get_device_name()}; copy {copy:.0f} GB/s")
    for model in ("map-neo-460m", "map-neo-7b"):
        shapes = [(o, i) for _, o, i in block_linear_shapes(CONFIGS[model])]
        for kind, density in (("normal", 0.5), ("rows", 0.25)):
            ws = weights(shapes, kind, dev)
            n = sum(w.numel() for w in ws)
            k = round(density * n)
            ok = check(ws, density)
            print(
                f"\n{model} {kind} bf16, {n / 1e6:.1f}M values, density {density}: counts {'equal' if ok else 'DIFFER'}"
            )
            if not ok:
                continue
            time_block(ws, k, copy)


def time_block(ws: list[torch.Tensor], k: int, copy: float) -> None:
    """Device time of the production passes and of the MMA passes over ``ws`` (counts checked before)."""
    from repro.timing import time_gpu

    n = sum(w.numel() for w in ws)
    flats = [w.reshape(-1).view(torch.int16) for w in ws]
    state = torch.zeros(2, dtype=torch.float32, device=ws[0].device)
    hist = torch.zeros(COUNTS_LEN, dtype=torch.int64, device=ws[0].device)

    def report(name: str, fn, passes: int) -> None:
        t = time_gpu(fn)
        gb = passes * 2 * n / (t.ms * 1e-3) / 1e9
        print(
            f"  {name:52s} {t.ms * 1e3:8.1f} us {100 * gb / copy:6.1f}% of copy ({passes} read{'s' if passes > 1 else ''})"
        )

    def prod(passes=(1, 2), select=True):  # the production passes, launched as FlexMasker does
        hist.zero_()
        for p in passes:
            kernel, grid, args, warps = hist16_launch(flats, hist, k, p)
            kernel[grid](*args, num_warps=warps)
        if select:
            select16(hist, state, k, torch.bfloat16)

    def mma(kc, warps, passes=(1, 2), select=True):
        hist.zero_()
        hist_mma_into(hist, flats, k, kc, warps, passes)
        if select:
            select16(hist, state, k, torch.bfloat16)

    report("production (tl.histogram): pass 1 alone", lambda: prod((1,), False), 1)
    report("production (tl.histogram): both passes + select", prod, 2)
    lo = max(pivot_key(ws, k) - 128, 0)
    out = torch.zeros(257, dtype=torch.int64, device=ws[0].device)

    def window(kc, warps):
        out.zero_()
        window_mma_into(out, flats, lo, kc, warps)

    for kc in (128, 256, 512):
        for warps in (4, 8):
            report(f"MMA KC={kc} warps={warps}: pass 1 alone", lambda kc=kc, w=warps: mma(kc, w, (1,), False), 1)
            report(f"MMA KC={kc} warps={warps}: both passes + select", lambda kc=kc, w=warps: mma(kc, w), 2)
            report(f"MMA KC={kc} warps={warps}: one warm-started window pass", lambda kc=kc, w=warps: window(kc, w), 1)


if __name__ == "__main__":
    main()
