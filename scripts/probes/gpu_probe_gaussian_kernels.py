"""GPU probe (device tool, one GPU): launch settings of the gaussian pivot search's Triton passes
(``kernels.ops._pivot_gaussian_triton``) on a MAP-NEO 460M-sized float32 buffer (327.2M values,
N(0, 0.02)), against a copy of the same buffer: the bin counts of the search's first round (65
edges over the middle 5% of |w|), the compaction of its second (the values of one of those bins)
and the float64 sums. CUDA events around each launch with a 256 MB flush between, median of 12
after 3 warm-ups; every setting's output is checked equal to the default's in the same run.
    python3 scripts/probes/gpu_probe_gaussian_kernels.py"""

from __future__ import annotations

import itertools
import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())
from kernels.ops._pivot_gaussian_triton import (  # noqa: E402
    abs_sums_triton,
    bin_counts_ge_triton,
    compact_between_triton,
)


def _ms(fn) -> float:
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    times = []
    for _ in range(15):
        flush.zero_()
        ev[0].record()
        fn()
        ev[1].record()
        torch.cuda.synchronize()
        times.append(ev[0].elapsed_time(ev[1]))
    return statistics.median(times[3:])


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(327_200_000, device="cuda") * 0.02
    gb = x.numel() * 4 / 1e9
    copy = _ms(lambda: x.clone())
    print(
        f"{torch.cuda.get_device_name()}: {x.numel() / 1e6:.1f}M float32, copy {copy * 1e3:.0f} us "
        f"({2 * gb / copy * 1e3:.0f} GB/s); a read at that rate {copy / 2 * 1e3:.0f} us",
        flush=True,
    )
    q = torch.quantile(x[:10_000_000].abs(), torch.tensor([0.475, 0.525], device="cuda")).tolist()
    edges = torch.linspace(q[0], q[1], 65, device="cuda").view(torch.int32)
    lo, hi = int(edges[31]), int(edges[32])
    ref_counts = bin_counts_ge_triton(x, edges)
    cap = int(ref_counts[31])
    ref_compact = compact_between_triton([x], lo, hi, cap, x.device).sort().values
    ref_sums = abs_sums_triton(x)
    print(f"inside the 65 edges: {int(ref_counts[:-1].sum())}; in the compacted bin: {cap}", flush=True)
    for block, warps, waves in itertools.product((1024, 2048, 4096), (4, 8), (2, 4, 8, 16)):
        if block // (32 * warps) < 4:
            continue
        kw = {"block": block, "num_warps": warps, "waves": waves}
        ok = torch.equal(bin_counts_ge_triton(x, edges, **kw), ref_counts)
        t_count = _ms(lambda kw=kw: bin_counts_ge_triton(x, edges, **kw))
        ok &= torch.equal(compact_between_triton([x], lo, hi, cap, x.device, **kw).sort().values, ref_compact)
        t_compact = _ms(lambda kw=kw: compact_between_triton([x], lo, hi, cap, x.device, **kw))
        s = abs_sums_triton(x, **kw)
        ok &= bool(torch.allclose(s, ref_sums, rtol=1e-12, atol=0))
        t_sums = _ms(lambda kw=kw: abs_sums_triton(x, **kw))
        print(
            f"block {block:5d} warps {warps} waves {waves:2d}: counts {t_count * 1e3:6.0f} us "
            f"({copy / 2 / t_count:4.0%} of a read), compaction {t_compact * 1e3:6.0f} us "
            f"({copy / 2 / t_compact:4.0%}), sums {t_sums * 1e3:6.0f} us ({copy / 2 / t_sums:4.0%}); "
            f"equal to the default: {ok}",
            flush=True,
        )


if __name__ == "__main__":
    main()
