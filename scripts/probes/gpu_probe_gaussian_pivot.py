"""GPU probe (device tool, one GPU): where FAST's distribution-aware (gaussian) pivot spends its
time per regeneration in fast_figure3_e2e at MAP-NEO 460M, against about 0.45 ms to read the
model's float32 sparse weights once. Times the pivot of ``ShardMasker`` for method "fast" (the
search, then the counts for the tie share) as ``TPTrainer`` builds it, host clock around a
synchronised call, beside:
- session 28's call (3259593): one buffer of |w| (``abs_``), the search's passes in torch
  (bucketize + histc counts, boolean-mask compaction; ``_triton_passes`` patched off in
  ``kernels.ops.pivot``), the tie share's counts by ``count_above_and_at``;
- the pieces themselves (the call before 3259593);
- session 29's call (69a43e3): the first count round streams the whole input (``_first_round``
  patched to keep nothing), the Triton passes otherwise as now;
- RadixPivot (fast_figure3_e2e's ``fast_radix``) for scale.
Checks that all give the same pivot and tie share, times the Triton bin-count pass alone against a
copy of the same buffer (CUDA events, median), and profiles the new call (CPU ops by self time,
CUDA kernels by device time, device-to-host reads).
    python3 scripts/probes/gpu_probe_gaussian_pivot.py [MODEL]"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_probe_gaussian_kernels import _ms as event_ms  # noqa: E402

import kernels.ops.pivot as pivot_mod  # noqa: E402
from kernels.ops._pivot_gaussian_triton import bin_counts_ge_triton  # noqa: E402
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

    def share(p: float, counts: torch.Tensor) -> tuple[float, float]:
        gt, eq = counts.tolist()
        return p, 1.0 if eq == 0 else min(1.0, max(0.0, (masker.k - gt) / eq))

    def pieces() -> tuple[float, float]:  # before 3259593
        p = find_pivot_stats(masker.pieces, 0.5, "gaussian", None, check_finite=False).pivot
        return share(p, count_above_and_at(masker.pieces, p))

    def torch_passes() -> tuple[float, float]:  # 3259593 (session 28)
        mags = torch.cat([w.reshape(-1) for w in masker.pieces]).abs_()
        saved = pivot_mod._triton_passes
        pivot_mod._triton_passes = lambda t: False
        try:
            p = find_pivot_stats([mags], 0.5, "gaussian", None, check_finite=False).pivot
        finally:
            pivot_mod._triton_passes = saved
        return share(p, count_above_and_at([mags], p))

    def whole_first_round() -> tuple[float, float]:  # 69a43e3 (session 29)
        saved = pivot_mod._first_round
        pivot_mod._first_round = lambda values, edges, n, h, comm: (None, pivot_mod._count_ge(values, edges, comm))
        try:
            return masker.pivot()
        finally:
            pivot_mod._first_round = saved

    radix = ShardMasker(weights, "fast", parse_pattern("TBS(4)"), 0.5, None, fast_pivot="radix")
    new = masker.pivot()
    same = {"pieces": pieces() == new, "torch passes": torch_passes() == new, "session 29": whole_first_round() == new}
    r = radix.pivot()
    same["RadixPivot"] = (float(r[0]), float(r[1])) == (new[0], new[1])
    print(f"pivot {new[0]!r}, tie share {new[1]!r}; the same from: {same}", flush=True)
    for name_, fn, reps in (
        ("ShardMasker.pivot (Triton passes, first round keeps the fit's interval, session 30)", masker.pivot, 7),
        ("the first round streams the whole input (69a43e3, session 29)", whole_first_round, 7),
        ("one |w| buffer, torch passes (3259593)", torch_passes, 5),
        ("the pieces, torch passes (before 3259593)", pieces, 3),
        ("RadixPivot (fast_radix)", radix.pivot, 7),
    ):
        ms = _timed(fn, reps)
        print(f"{name_}: median {statistics.median(ms):.2f} ms of {[round(m, 2) for m in ms]}", flush=True)
    if device.type == "cuda":  # as in training: new weights every call (new intervals, bounds, counts)
        from kernels.ops import _pivot_gaussian_triton as gt

        per_call = []
        for _ in range(20):
            with torch.no_grad():
                for w in masker.pieces:
                    w.mul_(1.0 + 1e-3 * torch.randn_like(w))
            per_call += _timed(masker.pivot, 1)
        variants = {}
        for k in ("_bin_count_kernel", "_compact_kernel", "_abs_sums_kernel"):
            caches = getattr(getattr(gt, k), "device_caches", {})
            variants[k] = sum(len(c[0]) for c in caches.values()) if caches else "?"
        print(
            f"20 calls on changing weights: median {statistics.median(per_call):.2f} ms, max {max(per_call):.2f} ms "
            f"({[round(m, 1) for m in per_call]}); compiled variants {variants}",
            flush=True,
        )
    res = find_pivot_stats(masker.pieces, 0.5, "gaussian", None, check_finite=False)
    print(f"  rounds {res.rounds}, candidates gathered {res.candidates}", flush=True)
    if device.type == "cuda":
        flat = torch.cat([w.reshape(-1) for w in masker.pieces])
        mid = float(flat.abs().median())
        edges = torch.linspace(0.5 * mid, 1.5 * mid, 65, device=device).view(torch.int32)
        for label, fn in (
            ("copy of the buffer", lambda: flat.clone()),
            ("bin counts (65 edges)", lambda: bin_counts_ge_triton(flat, edges)),
        ):
            t = event_ms(fn)  # CUDA events, L2 flushed, median after warm-up
            print(f"{label}: median {t * 1e3:.0f} us over {flat.numel() * 4 / 1e9:.2f} GB read", flush=True)
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
