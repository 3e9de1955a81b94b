"""Diagnostics for the GEGLU timing at small widths (not part of the suites): public call vs
preallocated launch vs CUDA-graph replay vs eager, with do_bench's default (write) flush and
with a read-only flush, plus host time per call. Prints a table; writes $OUT/diag.csv."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels.geglu import _GELU_TANH, _forward_into, geglu  # noqa: E402
from kernels.transposable import transposable_mask  # noqa: E402

OUT = Path(os.environ.get("OUT", "diag_out"))
OUT.mkdir(parents=True, exist_ok=True)
rows = []
flushbuf = torch.empty(256 * 2**20 // 4, dtype=torch.float32, device="cuda").normal_()


def events(fn, n=200, flush="read"):
    """Median ms with CUDA events; flush L2 by reading (clean lines) or writing (dirty lines)."""
    for _ in range(10):
        fn()
    ts = []
    for _ in range(n):
        if flush == "read":
            flushbuf.sum()
        else:
            flushbuf.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        ts.append((s, e))
    torch.cuda.synchronize()
    v = sorted(s.elapsed_time(e) for s, e in ts)
    return v[len(v) // 2]


def host_us(fn, n=300):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


for d in (768, 1024, 1600, 2048, 8192):
    z = torch.randn(d, 16384, device="cuda", dtype=torch.float16).t()
    out = torch.empty(d // 2, 16384, device="cuda", dtype=torch.float16).t()
    nbytes = z.numel() * 3
    fns = {
        "public": lambda z=z: geglu(z, approximate="tanh", check_finite=False),
        "into": lambda z=z, out=out: _forward_into(z, out, _GELU_TANH),
        "eager": lambda z=z, d=d: torch.nn.functional.gelu(z[:, : d // 2], approximate="tanh") * z[:, d // 2 :],
    }
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _forward_into(z, out, _GELU_TANH)
    fns["graph"] = g.replay
    for name, fn in fns.items():
        r = {"d": d, "method": name}
        r["do_bench_ms"] = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
        r["ev_readflush_ms"] = events(fn, flush="read")
        r["ev_writeflush_ms"] = events(fn, flush="write")
        r["host_us"] = host_us(fn)
        for k in ("do_bench_ms", "ev_readflush_ms", "ev_writeflush_ms"):
            r[k.replace("_ms", "_gbps")] = nbytes / r[k] / 1e6
        rows.append(r)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)

for r_, c_ in [(3072, 768), (30768, 8192)]:
    w = torch.randn(r_, c_, device="cuda", dtype=torch.float16)
    for m in ("approx2", "exhaustive"):
        ms = triton.testing.do_bench(
            lambda w=w, m=m: transposable_mask(w, method=m, check_finite=False),
            warmup=25,
            rep=200,
            return_mode="median",
        )
        rows.append({"d": f"{r_}x{c_}", "method": m, "do_bench_ms": ms})
        print(f"transposable {r_}x{c_} {m}: {ms:.4f} ms", flush=True)
pd.DataFrame(rows).to_csv(OUT / "diag.csv", index=False)
