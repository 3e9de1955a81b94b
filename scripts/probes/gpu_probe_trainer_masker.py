"""Probe (GPU, not a suite): where does figure3's training-step part spend its time with compiled
TBS(8) baselines? At 01a159e on one H200 its first configuration (MAP-NEO 460M, fp32 weights,
masks every step, the PyTorch baseline compiled) finished no step in about 9 minutes
(results/tuning/h200_figure3_unfinished_01a159e.txt). This builds the same masker the trainer
builds (``TorchFlexMasker`` over the model's 168 sparse-linear weights, ``compile=True``, under
``no_grad``) and times each part on its own, host time after a synchronize, printed as it goes:
the whole-model pivot's compile and a second call, the mask function's first weight (its compile)
and the rest, a whole call; then the masks against the eager masker's. Run it with
``TORCH_LOGS=recompiles`` to see dynamo's recompiles. Stops starting new parts after ``--budget``
seconds.

    TORCH_LOGS=recompiles python3 scripts/probes/gpu_probe_trainer_masker.py [--budget 300]

Found on an H200 (session 33): the stall was the pivot's compile, a graph with the 168 weights as
inputs whose dimensions the TBS(8) masker had marked dynamic; fixed in 5e6fcdb (INDEX.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.flex_torch import TorchFlexMasker, pivot_and_tie, recompile_limit  # noqa: E402
from kernels.ops.patterns import TBS  # noqa: E402
from repro.models.llama import CONFIGS, LlamaConfig, LlamaModel, sparse_linears  # noqa: E402
from suites.figure3 import DENSITY  # noqa: E402


def timed(label: str, fn, t0: float):
    s = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    print(f"[{time.perf_counter() - t0:7.1f}s] {label}: {time.perf_counter() - s:.2f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=300.0)
    ap.add_argument("--methods", default="torch,vegeta")
    ap.add_argument("--smoke", action="store_true", help="a small 24-layer model (168 weights, as 460M has) on the CPU")
    ap.add_argument(
        "--old-pivot",
        action="store_true",
        help="only time the pivot compiled as at a6d205f: pivot_and_tie over the 168 weights as inputs",
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    dev = torch.device("cpu" if args.smoke else "cuda")
    print(torch.__version__, torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", flush=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden=64, ffn=176, layers=24, heads=4, vocab=256, seq_len=32) if args.smoke else None
    model = LlamaModel(cfg or CONFIGS["map-neo-460m"]).to(dev)
    ws = [lin.weight.detach() for lin in sparse_linears(model).values()]
    shapes = sorted({tuple(w.shape) for w in ws})
    print(f"{len(ws)} weights, {sum(w.numel() for w in ws) / 1e6:.1f}M fp32 values, shapes {shapes}", flush=True)
    pattern = TBS(8)
    if args.old_pivot:
        k = round(DENSITY * sum(w.numel() for w in ws))
        old = torch.compile(pivot_and_tie, fullgraph=True, dynamic=False)
        with torch.no_grad():
            timed("pivot_and_tie over the weights as graph inputs, compile + first call", lambda: old(ws, k), t0)
        return
    with torch.no_grad():
        for method in args.methods.split(","):
            if time.perf_counter() - t0 > args.budget:
                print(f"{method}: not started (budget)", flush=True)
                continue
            m = TorchFlexMasker(ws, pattern, DENSITY, method, compile=True)
            pivot, tie = timed(f"{method} pivot, compile + first call", m._pivot, t0)
            timed(f"{method} pivot, second call", m._pivot, t0)

            def one(w, m=m, pivot=pivot, tie=tie):
                with recompile_limit(1024):
                    return m._mask(w, m.pattern, m.method, m.configs, pivot, tie, m.table)

            w0 = m.weights[0]
            timed(f"{method} mask of weight 0 {tuple(w0.shape)}, compile + first call", lambda w0=w0: one(w0), t0)
            for shape in shapes:
                w = next(w for w in m.weights if tuple(w.shape) == shape)
                timed(f"{method} mask of one {shape} weight", lambda w=w: one(w), t0)
                if time.perf_counter() - t0 > args.budget:
                    break
            got = timed(f"{method} whole masker call", m, t0)
            timed(f"{method} whole masker call again", m, t0)
            want = timed(f"{method} eager masker call", TorchFlexMasker(ws, pattern, DENSITY, method), t0)
            same = all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
            print(f"{method}: compiled masks equal to eager: {same}", flush=True)
    print(torch._dynamo.utils.compile_times(), flush=True)


if __name__ == "__main__":
    main()
