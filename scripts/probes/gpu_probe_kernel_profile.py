"""GPU probe (device tool): the kernels of one eager fwd + bwd of figure6's FFN (dense and fst),
as ``repro.kernel_profile`` records and categorizes them, beside the graph-replay time: checks
that the profiler sees every kernel and that the categories catch them.
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_kernel_profile.py [d:N ...]   (default 2048:4)"""

from __future__ import annotations

import sys
from collections import defaultdict

import torch

from repro.kernel_profile import by_category, categorize, kernel_times
from repro.timing import time_fn
from suites import figure6
from suites._training_bench import fwd_bwd

DEV = torch.device("cuda")


def main() -> None:
    shapes = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(2048, 4)]
    n = figure6.FFN_N
    for d, batch in shapes:
        x, dy = figure6._inputs(DEV, batch, n, d)  # the suite's own inputs
        for mode in ("dense", "fst"):
            mod = figure6._build("ffn", figure6._cfg(d, n), mode, DEV)
            call = fwd_bwd(mod, x, dy)
            ks = kernel_times(call, DEV)
            graph_ms = time_fn(call, DEV, graph=True).ms
            total = sum(ms for _, ms in ks)
            head = f"== ffn d={d} N={batch} {mode}: {len(ks)} kernels, {total:.3f} ms of kernels"
            print(f"{head}; graph {graph_ms:.3f} ms")
            names: dict[str, list[float]] = defaultdict(list)
            for name, ms in ks:
                names[name].append(ms)
            for name, v in sorted(names.items(), key=lambda kv: -sum(kv[1])):
                print(f"   {sum(v):7.3f} ms x{len(v):2d}  [{categorize(name)}]  {name[:150]}")
            for cat, ms in by_category(ks).items():
                print(f"   {cat:40s} {ms:7.3f} ms")
            del mod


if __name__ == "__main__":
    main()
