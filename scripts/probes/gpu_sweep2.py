"""Second tuning sweep (not part of the suites): GEGLU flat-kernel block/warps and small-shape
transposable configs, all graph-timed like the suites, plus a copy moving the same bytes.
Writes $OUT/sweep2.csv."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

import pandas as pd
import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops._transposable_triton import transposable24_kernel  # noqa: E402
from kernels.ops.geglu import GELU_TANH, _fwd_flat_kernel  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

OUT = Path(os.environ.get("OUT", "sweep_out"))
OUT.mkdir(parents=True, exist_ok=True)
rows = []
big = torch.randn(512 * 2**20 // 4 * 4, device="cuda")
big2 = torch.empty_like(big)
COPY = 2 * big.numel() * 4 / time_gpu(partial(big2.copy_, big), graph=False).ms / 1e6
print(f"copy {COPY:.0f} GB/s", flush=True)
del big, big2

for d in (768, 1024, 2048, 4096, 8192):
    z = torch.randn(d, 16384, device="cuda", dtype=torch.float16)
    out = torch.empty(d // 2, 16384, device="cuda", dtype=torch.float16)
    n = out.numel()
    nbytes = z.numel() * 2 + out.numel() * 2
    a = torch.empty(nbytes // 4, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    same = nbytes / 2 / time_gpu(partial(b.copy_, a), graph=False).ms / 1e6
    best = None
    for block in (1024, 2048, 4096, 8192, 16384):
        for warps in (4, 8, 16):
            f = partial(
                _fwd_flat_kernel[(triton.cdiv(n, block),)], z, out, n, ACT=GELU_TANH, BLOCK=block, num_warps=warps
            )
            gb = nbytes / time_gpu(f).ms / 1e6
            rows.append(
                dict(
                    kernel="geglu_flat",
                    shape=f"16384x{d}",
                    block=block,
                    warps=warps,
                    gbps=gb,
                    pct=100 * gb / COPY,
                    same_bytes_copy_gbps=same,
                )
            )
            if best is None or gb > best[0]:
                best = (gb, block, warps)
    print(
        f"geglu d={d}: best block={best[1]} warps={best[2]} {best[0]:.0f} GB/s ({100 * best[0] / COPY:.1f}%);"
        f" same-bytes copy {same:.0f} GB/s ({100 * same / COPY:.1f}%)",
        flush=True,
    )

for r, c in [(3072, 768), (1024, 1600), (4096, 1024), (8192, 2048)]:
    for dt in (torch.float16, torch.float32):
        w = torch.randn(r, c, device="cuda", dtype=dt)
        nbytes = w.numel() * (w.element_size() + 1)
        out = torch.empty(r, c, dtype=torch.int8, device="cuda")
        best = None
        for tr in (1, 2, 4):
            for tc in (16, 32, 64, 128):
                for warps in (1, 2, 4):
                    grid = (triton.cdiv(r // 4, tr), triton.cdiv(c // 4, tc))
                    f = partial(
                        transposable24_kernel[grid],
                        w,
                        out,
                        r // 4,
                        c // 4,
                        w.stride(0),
                        out.stride(0),
                        TR=tr,
                        TC=tc,
                        num_warps=warps,
                    )
                    gb = nbytes / time_gpu(f).ms / 1e6
                    rows.append(
                        dict(
                            kernel="transposable",
                            shape=f"{r}x{c}",
                            dtype=str(dt),
                            tr=tr,
                            tc=tc,
                            warps=warps,
                            gbps=gb,
                            pct=100 * gb / COPY,
                        )
                    )
                    if best is None or gb > best[0]:
                        best = (gb, tr, tc, warps)
        print(
            f"transposable {r}x{c} {dt}: best {best[1:]} {best[0]:.0f} GB/s ({100 * best[0] / COPY:.1f}%)", flush=True
        )
pd.DataFrame(rows).to_csv(OUT / "sweep2.csv", index=False)
