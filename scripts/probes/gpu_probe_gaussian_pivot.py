"""GPU probe (device tool, one GPU): where FAST's distribution-aware (gaussian) pivot spends its
48-64 ms per regeneration in fast_figure3_e2e at MAP-NEO 460M (campaign 865a540), against about
1.5 ms to read the model's float32 sparse weights three times. Times the pivot of ``ShardMasker``
for method "fast" (the search, then the counts for the tie share) as ``TPTrainer`` builds it, host
clock around a synchronised call: the former call on the pieces themselves beside
``ShardMasker.pivot``, which since session 28 joins the pieces' |w| into one buffer first; checks
that both give the same pivot and tie share, and profiles the new one (CPU ops by self time, CUDA
kernels by device time, device-to-host reads).
    python3 scripts/probes/gpu_probe_gaussian_pivot.py [MODEL]"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
from kernels.ops.patterns import parse_pattern  # noqa: E402
from kernels.ops.pivot import find_pivot_stats  # noqa: E402
from repro.models.llama import CONFIGS, LlamaModel  # noqa: E402
from repro.tp_step import ShardMasker, count_above_and_at  # noqa: E402
from suites.fast_figure3_e2e import SMOKE  # noqa: E402


def _timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "map-neo-460m"
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = SMOKE if name == "smoke" else CONFIGS[name]
    torch.manual_seed(0)
    model = LlamaModel(cfg, device=device)
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight.dim() == 2]
    weights = [w for w in weights if w.shape[0] != cfg.vocab and w.shape[1] != cfg.vocab]
    n = sum(w.numel() for w in weights)
    masker = ShardMasker(weights, "fast", parse_pattern("TBS(4)"), 0.5, None)
    print(f"{name}: {len(weights)} sparse weights, {n / 1e6:.1f}M float32 values on {device}", flush=True)

    def former() -> tuple[float, float]:
        p = find_pivot_stats(masker.pieces, 0.5, "gaussian", None, check_finite=False).pivot
        gt, eq = count_above_and_at(masker.pieces, p).tolist()
        return p, 1.0 if eq == 0 else min(1.0, max(0.0, (masker.k - gt) / eq))

    same = former() == masker.pivot()
    print(f"the pieces (former) and one buffer (ShardMasker.pivot) give the same pivot and tie share: {same}")
    ms = _timed(former, 5)
    print(f"former: search and counts over the pieces: median {statistics.median(ms):.1f} ms", flush=True)
    ms = _timed(masker.pivot, 5)
    print(f"ShardMasker.pivot (one buffer: search + tie counts): median {statistics.median(ms):.1f} ms", flush=True)
    res = find_pivot_stats(masker.pieces, 0.5, "gaussian", None, check_finite=False)
    print(f"  rounds {res.rounds}, candidates gathered {res.candidates}", flush=True)
    ms = _timed(lambda: find_pivot_stats(masker.pieces, 0.5, "gaussian", None, check_finite=False), 5)
    print(f"find_pivot_stats(gaussian) alone: median {statistics.median(ms):.1f} ms", flush=True)
    ms = _timed(lambda: find_pivot_stats(masker.pieces, 0.5, "radix", None, check_finite=False), 3)
    print(f"find_pivot_stats(radix, host rounds) for scale: median {statistics.median(ms):.1f} ms", flush=True)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        masker.pivot()
    ev = prof.key_averages()
    print("CPU ops by self time (top 15):")
    for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:15]:
        print(f"  {e.self_cpu_time_total / 1e3:8.2f} ms  x{e.count:<5d} {e.key[:80]}")
    if device.type == "cuda":
        print("CUDA kernels by device time (top 12):")
        kern = [e for e in ev if getattr(e, "device_time_total", 0) > 0 and not e.key.startswith(("aten::", "cuda"))]
        for e in sorted(kern, key=lambda e: -e.device_time_total)[:12]:
            print(f"  {e.device_time_total / 1e3:8.2f} ms  x{e.count:<5d} {e.key[:80]}")
        reads = ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize")
        syncs = sum(e.count for e in ev if e.key in reads)
        print(f"host reads / stream syncs counted: {syncs}")


if __name__ == "__main__":
    main()
