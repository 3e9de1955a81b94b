# ruff: noqa: E501
"""Probe (not a suite): FAST Fig. 3 on one MAP-NEO 460M block (7 bf16 weights, 13.6M values).

1. Pivot building blocks: torch.topk / sort on the concatenated magnitudes (what the strong
   baselines can use), our two-pass 16-bit histogram (FlexMasker's), and histogram variants with
   fewer bins per pass reading the weights in place through a pointer table (one launch for all
   weights, no concatenation copy): GB/s per pass.
2. The strong baselines (kernels.ops.flex_torch, eager and compiled, graph-replayed) against FAST's
   FlexMasker (graph-replayed), per pattern, % of copy bandwidth.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.flex import FlexMasker  # noqa: E402
from kernels.ops.flex_torch import TorchFlexMasker  # noqa: E402
from kernels.ops.patterns import parse_pattern  # noqa: E402
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402
from repro.roofline import measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
ws = [
    (0.02 * torch.randn(o, i, device=dev, generator=gen)).to(torch.bfloat16)
    for _, o, i in block_linear_shapes(CONFIGS["map-neo-460m"])
]
n = sum(w.numel() for w in ws)
nbytes = n * 2
ceil = measure_ceilings(dev)
COPY = ceil.copy_gbps
print(f"copy {COPY:.0f} GB/s; block {n / 1e6:.2f}M values, {nbytes / 1e6:.1f} MB")


def report(name: str, ms: float, nb: int) -> None:
    gb = nb / (ms * 1e-3) / 1e9
    print(f"{name:58s} {ms * 1e3:9.1f} us {gb:8.0f} GB/s {100 * gb / COPY:6.1f}% of copy")


flat = torch.cat([w.reshape(-1) for w in ws])
k = n // 2
report("cat of the block (read+write)", time_gpu(lambda: torch.cat([w.reshape(-1) for w in ws])).ms, 2 * nbytes)
report("topk(|cat|, k, sorted=False) bf16", time_gpu(lambda: torch.topk(flat.abs(), k, sorted=False)).ms, nbytes)
report(
    "topk(|cat|.float(), k, sorted=False)", time_gpu(lambda: torch.topk(flat.abs().float(), k, sorted=False)).ms, nbytes
)
report("sort(|cat|) bf16", time_gpu(lambda: torch.sort(flat.abs())).ms, nbytes)
report("sort(|cat| as int16) ", time_gpu(lambda: torch.sort(flat.view(torch.int16) & 0x7FFF)).ms, nbytes)
bins = torch.zeros(32768, dtype=torch.int64, device=dev)
ones = torch.ones(n, dtype=torch.int64, device=dev)


def scatter_hist() -> None:
    bins.zero_()
    bins.index_add_(0, (flat.view(torch.int16) & 0x7FFF).long(), ones)


report("index_add_ 32768-bin histogram (one pass)", time_gpu(scatter_hist).ms, nbytes)
report("histc 2048 bins", time_gpu(lambda: torch.histc(flat.abs().float(), 2048, 0, 0.2)).ms, nbytes)

from kernels.ops._pivot_triton import COUNTS_LEN, hist16_launch  # noqa: E402

counts = torch.zeros(COUNTS_LEN, dtype=torch.int64, device=dev)
f16 = flat.view(torch.int16)
for p in (1, 2):
    kern, grid, args, warps = hist16_launch([f16], counts, k, p)
    call = partial(kern[grid], *args, num_warps=warps)
    report(f"current _hist16_kernel pass {p} (cat buffer)", time_gpu(call).ms, nbytes)


@triton.jit
def _hist_table(
    addr_ptr,
    start_ptr,
    size_ptr,
    hist_ptr,
    SHIFT: tl.constexpr,
    BITS: tl.constexpr,
    BLOCK: tl.constexpr,
    NW: tl.constexpr,
    WARPS_SPLIT: tl.constexpr,
):
    pid = tl.program_id(0)
    j = tl.arange(0, NW)
    starts = tl.load(start_ptr + j)
    w = tl.sum((starts <= pid).to(tl.int32), 0) - 1
    base = tl.load(addr_ptr + w).to(tl.pointer_type(tl.int16))
    size = tl.load(size_ptr + w)
    offs = (pid - tl.load(start_ptr + w)).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < size
    v = tl.load(base + offs, mask=m, other=0).to(tl.int32) & 0x7FFF
    b = (v >> SHIFT) & ((1 << BITS) - 1)
    h = tl.histogram(b, 1 << BITS)
    ar = tl.arange(0, 1 << BITS)
    h = h - tl.where(ar == 0, BLOCK - tl.sum(m.to(tl.int32), 0), 0)
    tl.atomic_add(hist_ptr + ar, h, sem="relaxed")


def table_launch(bits: int, block: int, warps: int):
    nw = 8
    sizes = [w.numel() for w in ws]
    blocks = [triton.cdiv(s, block) for s in sizes]
    starts = [sum(blocks[:i]) for i in range(len(ws))] + [1 << 30] * (nw - len(ws))
    addr = torch.tensor([w.data_ptr() for w in ws] + [0] * (nw - len(ws)), dtype=torch.int64, device=dev)
    start_t = torch.tensor(starts, dtype=torch.int32, device=dev)
    size_t = torch.tensor(sizes + [0] * (nw - len(ws)), dtype=torch.int64, device=dev)
    hist = torch.zeros(1 << bits, dtype=torch.int32, device=dev)
    grid = (sum(blocks),)

    def call() -> None:
        _hist_table[grid](addr, start_t, size_t, hist, 15 - bits, bits, block, nw, 0, num_warps=warps)

    call()
    torch.cuda.synchronize()
    hist.zero_()
    call()
    want = torch.bincount(((flat.view(torch.int16).int() & 0x7FFF) >> (15 - bits)), minlength=1 << bits)
    ok = torch.equal(hist.long().cpu(), want.cpu())
    return call, ok


for bits in (4, 5, 6, 7, 8):
    for block in (2048, 8192, 32768):
        for warps in (4, 8):
            try:
                call, ok = table_launch(bits, block, warps)
                report(
                    f"table hist {1 << bits:4d} bins BLOCK={block:5d} warps={warps} ok={ok}", time_gpu(call).ms, nbytes
                )
            except Exception as e:  # noqa: BLE001
                print(f"table hist bits={bits} block={block} warps={warps}: {type(e).__name__}: {str(e)[:120]}")

print(
    "\n## whole mask generation of the block (graph replay); bytes = 3 reads + mask write (pivoted) or 1 read + write (n:m)"
)
for spec in ("TBS(4)", "TBS(8)", "Vegeta(4)", "Vegeta(8)", "2:4"):
    pat = parse_pattern(spec)
    d = 0.5
    nb = (3 if len(pat.configs) > 1 else 1) * nbytes + n
    fm = FlexMasker(ws, pat, d, 1234)
    report(f"{spec:10s} fast FlexMasker", time_gpu(partial(fm, check=False)).ms, nb)
    for method in ("torch", "vegeta"):
        for comp in (False, True):
            try:
                tm = TorchFlexMasker(ws, pat, d, method, compile=comp)
                report(f"{spec:10s} {method}{'_compiled' if comp else ''}", time_gpu(partial(tm, check=False)).ms, nb)
            except Exception as e:  # noqa: BLE001
                print(f"{spec} {method} compiled={comp}: {type(e).__name__}: {str(e)[:200]}")
