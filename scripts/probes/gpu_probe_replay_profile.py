# ruff: noqa: E501
"""Probe (not a suite): does torch.profiler see the kernels of a CUDA-graph replay, and do they
explain the replay time better than the kernels of an eager step? table8's breakdown profiles one
eager step; at GPT-2 774M N=23 its dense kernels summed to 15.6 ms more than the replay (fst: 2.4 ms).
For each model: the eager kernel sum, the replay's kernel sum, the replay time (CUDA events), and
per category the difference replay - eager.

usage: python3 scripts/probes/gpu_probe_replay_profile.py [model:batch ...]   (default gpt2-124m:16 gpt2-774m:23)"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from repro.kernel_profile import ORDER, by_category, kernel_times  # noqa: E402
from repro.models.gpt2 import CONFIGS  # noqa: E402
from repro.timing import bench_events, capture_graph, release_memory  # noqa: E402
from suites.table8 import _model, _Step  # noqa: E402

dev = torch.device("cuda")


def probe(name: str, batch: int, mode: str) -> None:
    cfg = CONFIGS[name]
    gen = torch.Generator(device=dev).manual_seed(3)
    tokens = torch.randint(0, cfg.vocab_size, (batch, 1024), device=dev, generator=gen)
    targets = torch.randint(0, cfg.vocab_size, (batch, 1024), device=dev, generator=gen)
    model = _model(cfg, mode, dev)
    step = _Step(model, tokens, targets, True)
    step.loss()
    eager_k = kernel_times(step, dev)
    graph = capture_graph(step)
    replay_ms = bench_events(graph.replay)
    replay_k = kernel_times(graph.replay, dev)
    replay_ms2 = bench_events(graph.replay)
    eager, replay = by_category(eager_k), by_category(replay_k)
    print(
        f"{name} N={batch} {mode}: replay {replay_ms:.1f} / {replay_ms2:.1f} ms (before / after its profile); "
        f"kernels: eager {sum(eager.values()):.1f} ms in {len(eager_k)}, replay {sum(replay.values()):.1f} ms in {len(replay_k)}",
        flush=True,
    )
    for c in ORDER:
        if eager[c] or replay[c]:
            print(
                f"    {c:38s} eager {eager[c]:8.2f}  replay {replay[c]:8.2f}  diff {replay[c] - eager[c]:+7.2f}",
                flush=True,
            )
    gemm = {}
    for which, ks in (("eager", eager_k), ("replay", replay_k)):
        for n, ms in ks:
            if by_category([(n, 1.0)])["GEMMs"]:
                gemm.setdefault(n[:90], {}).setdefault(which, 0.0)
                gemm[n[:90]][which] += ms
    top = sorted(gemm.items(), key=lambda kv: -abs(kv[1].get("replay", 0) - kv[1].get("eager", 0)))[:8]
    for n, v in top:
        print(f"    GEMM {n:90s} eager {v.get('eager', 0):7.2f} replay {v.get('replay', 0):7.2f}", flush=True)
    del graph, step, model
    release_memory(dev)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for arg in sys.argv[1:] or ["gpt2-124m:16", "gpt2-774m:23"]:
        name, batch = arg.split(":")
        for mode in ("dense", "fst"):
            probe(name, int(batch), mode)
