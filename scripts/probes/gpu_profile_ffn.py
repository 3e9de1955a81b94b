"""GPU profile (device tool): kernel-level device times of one fst and one dense FFN fwd+bwd
(figure6's modules, mixed precision), to see where the fst FFN's non-GEMM time goes.
    usage: python3 scripts/probes/gpu_profile_ffn.py [d] [N]   (default 2048 4)"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from suites import figure6
from suites._training_bench import fwd_bwd


def main() -> None:
    d = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    n, dev = figure6.FFN_N, torch.device("cuda")
    x, dy = figure6._inputs(dev, batch, n, d)  # the suite's own inputs
    for mode in ("dense", "fst"):
        mod = figure6._build("ffn", figure6._cfg(d, n), mode, dev)
        call = fwd_bwd(mod, x, dy)
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                call()
            torch.cuda.synchronize()
        print(f"===== {mode} d={d} N={batch}: per call (5 calls profiled)")
        rows = []
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA or getattr(e, "self_device_time_total", 0) > 0:
                t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
                rows.append((t / 5 / 1e3, e.count // 5, e.key[:110]))
        rows.sort(reverse=True)
        tot = sum(r[0] for r in rows)
        for t, c, k in rows[:25]:
            print(f"{t:8.3f} ms  x{c:<3d} {k}")
        print(f"{tot:8.3f} ms  total device time per call")
        del mod


if __name__ == "__main__":
    main()
