"""GPU probe (device tool): where a GPT-2 training step's memory goes, phase by phase, the way
table8 runs it (build on the device, first forward, loss check against the float32 twin, eager
step, side-stream warm-up, CUDA-graph capture, replay). Prints allocated / reserved / peak at each
phase and, on an out-of-memory error, the reserved memory and the error's first line: how much of
the GPU the caching allocator holds but does not use. Run it once per allocator setting:
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONPATH=. python3 scripts/probes/gpu_probe_step_memory.py \
        gpt2-774m:dense:16 gpt2-774m:fst:15 ..."""

from __future__ import annotations

import os
import sys
import time

import torch

from repro.models.gpt2 import CONFIGS
from scripts.probes.gpu_probe_max_batch import _Quiet
from suites import table8

GIB = 2**30
T0 = time.perf_counter()


def mem(tag: str) -> None:
    torch.cuda.synchronize()
    a, r, p = torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), torch.cuda.max_memory_allocated()
    print(f"   {tag:28s} allocated {a / GIB:6.1f}  reserved {r / GIB:6.1f}  peak {p / GIB:6.1f} GiB", flush=True)


def capture(fn) -> torch.cuda.CUDAGraph:
    """``repro.timing.capture_graph`` with a memory report between its phases."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    mem("before warm-up (emptied)")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    mem("after side-stream warm-up")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    mem("after capture")
    return graph


def one(name: str, mode: str, batch: int) -> None:
    cfg, dev = CONFIGS[name], torch.device("cuda")
    model = step = graph = None
    torch.cuda.reset_peak_memory_stats()
    print(f"[{time.perf_counter() - T0:6.1f}s] {name} {mode} N={batch}", flush=True)
    try:
        tokens = torch.randint(0, cfg.vocab_size, (batch, table8.SEQ), device=dev)
        model = table8._model(cfg, mode, dev)
        step = table8._Step(model, tokens, tokens, True)
        mem("built")
        step.loss()
        mem("first forward")
        if mode not in ("dense", "half"):
            table8._check_loss(_Quiet(), model, cfg, tokens, tokens, f"{name} N={batch}")
            mem("loss check")
        step()
        mem("eager step")
        graph = capture(step)
        graph.replay()
        mem("replay")
        print("   fits", flush=True)
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        r = torch.cuda.memory_reserved() / GIB
        a = torch.cuda.memory_allocated() / GIB
        print(f"   OOM: allocated {a:.1f} reserved {r:.1f} GiB: {str(e).splitlines()[0][:300]}", flush=True)
    model = step = graph = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def main() -> None:
    free, total = torch.cuda.mem_get_info()
    print(
        f"{torch.cuda.get_device_name(0)}: {total / GIB:.1f} GiB, free {free / GIB:.1f}; "
        f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}",
        flush=True,
    )
    for spec in sys.argv[1:]:
        name, mode, batch = spec.split(":")
        one(name, mode, int(batch))


if __name__ == "__main__":
    main()
