"""Probe (GPU, not a suite): can figure3 compile its baselines on every model? Times the compile
and the eager vs compiled call (``repro.timing.time_gpu``, as figure3 times) of ``TorchFlexMasker``
and checks the masks against the eager ones:
first TBS(8) on a MAP-NEO 460M block (one graph for every shape: ``masks_any_shape``), then
TBS(4) / Vegeta(8) / 2:4 on a Llama-2 13B block (static shapes). Stops starting new cases after
``--budget`` seconds. Record: results/tuning/h200_probe_compiled_baselines.txt.

    python3 scripts/probes/gpu_probe_compiled_baselines.py [--budget 90]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.flex_torch import TorchFlexMasker  # noqa: E402
from kernels.ops.patterns import parse_pattern  # noqa: E402
from repro.timing import time_gpu  # noqa: E402
from suites.figure3 import DENSITY, _block, _models  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=90.0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    dev = torch.device("cuda")
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    models = _models("full")
    cases = [("map-neo-460m", "TBS(8)")] + [("llama2-13b", p) for p in ("TBS(4)", "Vegeta(8)", "2:4")]
    for model, pat in cases:
        if time.perf_counter() - t0 > args.budget:
            print(f"{model} {pat}: not started (budget)", flush=True)
            continue
        ws = list(_block(models[model], dev, torch.Generator(device=dev).manual_seed(0)).values())
        pattern = parse_pattern(pat)
        eager = TorchFlexMasker(ws, pattern, DENSITY, "torch")
        comp = TorchFlexMasker(ws, pattern, DENSITY, "torch", compile=True)
        s = time.perf_counter()
        got = comp()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - s
        want = eager()
        same = all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        print(f"{model} {pat}: compile+first call {compile_s:.1f} s, masks equal to eager: {same}", flush=True)
        # graph replays, L2 flushed, median (figure3's timer); the calls without their host-read check
        e, c = time_gpu(partial(eager, check=False)).ms, time_gpu(partial(comp, check=False)).ms
        print(f"   eager {e:.2f} ms, compiled {c:.2f} ms a block", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
