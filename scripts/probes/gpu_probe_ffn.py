"""GPU probe (device tool): figure6's FFN measurement and breakdown at a few shapes, to check the
fst FFN (column-major inner activation, fused bias, mixed precision) before a full campaign.
    usage: python3 scripts/probes/gpu_probe_ffn.py [d:N | block:d:n:N ...]   (default 2048:4 4096:4 4096:8 1280:4)
An argument ``block:d:n:N`` measures one transformer block (fst and half) instead."""

from __future__ import annotations

import sys
import time

import torch

from repro.timing import time_fn
from suites import figure6


class _Results:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, method=None, shape=None, dtype=None, metric=None, value=None, unit="", **kw) -> None:
        self.rows.append({"method": method, "shape": shape, "metric": metric, "value": value, "unit": unit})


class _Ctx:
    def __init__(self) -> None:
        self.device = torch.device("cuda")
        self.results = _Results()
        from repro.roofline import measure_ceilings

        self.ceilings = measure_ceilings(self.device)
        self.t0 = time.perf_counter()

    def log(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", flush=True)

    def time(self, fn, graph: bool = True, **kw):
        return time_fn(fn, self.device, graph=graph, **kw)

    def check(self, ok: bool, what: str) -> None:
        print(("ok   " if ok else "FAIL ") + what, flush=True)


def main() -> None:
    args = sys.argv[1:] or ["2048:4", "4096:4", "4096:8", "1280:4", "block:1600:2048:8"]
    ctx = _Ctx()
    n = figure6.FFN_N
    for a in args:
        if a.startswith("block:"):
            d, bn, batch = (int(v) for v in a.split(":")[1:])
            figure6._measure(ctx, "block", figure6._cfg(d, bn), batch, bn, ("fst", "half"))
            continue
        d, batch = (int(v) for v in a.split(":"))
        figure6._measure(ctx, "ffn", figure6._cfg(d, n), batch, n, ("fst", "weight24", "half"))
        figure6._breakdown(ctx, d, batch, n)
    import kernels.ops.sparse_gemm as sg

    for key, cfg in sg._ALG_CACHE.items():  # the cuSPARSELt configs this process chose by timing
        print(f"cslt config {key}: {cfg}", flush=True)


if __name__ == "__main__":
    main()
