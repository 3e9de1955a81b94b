"""Experiment (not a suite): how the L2 flush method moves the measured bandwidth of the Table 3
GEGLU kernel and of a same-bytes copy. do_bench's flush (zero-fill, dirty lines) vs a read flush
(clean lines) vs none; prints % of the 2 GiB copy for each."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.geglu import geglu  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

big = torch.randn(512 * 2**20, device="cuda")
big2 = torch.empty_like(big)
copy = {}
for f in ("read", "write"):
    copy[f] = 2 * big.numel() * 4 / time_gpu(partial(big2.copy_, big), graph=False, flush=f).ms / 1e6
del big, big2
print("2GiB copy GB/s", {k: round(v) for k, v in copy.items()})
for d in (768, 2048, 4096, 8192):
    z = torch.randn(d, 16384, device="cuda", dtype=torch.float16).t()
    nbytes = z.numel() * 2 * 3 // 2
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    row = [f"d={d} ({nbytes / 1e6:.0f} MB):"]
    for f in ("read", "write", "none"):
        t = time_gpu(partial(geglu, z, approximate="tanh", check_finite=False), flush=f)
        tc = time_gpu(partial(dst.copy_, src), graph=False, flush=f)
        bw, cbw = nbytes / t.ms / 1e6, nbytes / tc.ms / 1e6
        row.append(f"{f}: geglu {100 * bw / copy['read']:.1f}% same-bytes copy {100 * cbw / copy['read']:.1f}%")
    print("  ".join(row))
