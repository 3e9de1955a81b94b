"""Timers. GPU: ``triton.testing.do_bench`` over CUDA-graph replays of the call (CUDA events,
warm-up, L2 flushed between runs, median). CPU (smoke profile only): host clock median after
warm-up. A timing always says which of the two produced it, so CPU numbers are never mixed with
GPU numbers."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    ms: float  # median milliseconds per call
    timer: str  # "cuda-do_bench" or "cpu-perf_counter"
    reps: int


_CAPTURE_BROKEN = False


def capture_graph(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """Record ``fn`` (already warmed up) into a CUDA graph; raises if it syncs with the host."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def time_gpu(fn: Callable[[], object], warmup_ms: float = 25.0, rep_ms: float = 100.0, graph: bool = True) -> Timing:
    """Median device time of ``fn``; do_bench flushes L2 before each call.

    With ``graph`` (default) the call is captured in a CUDA graph and its replays are timed, so
    the number is device time, not the host's launch overhead (which otherwise leaks into the
    events of sub-100-microsecond kernels); a call that cannot be captured (it syncs with the
    host) is timed directly. The ``timer`` field says which.
    """
    import triton.testing

    global _CAPTURE_BROKEN
    fn()
    torch.cuda.synchronize()
    if graph and not _CAPTURE_BROKEN:
        try:
            g = capture_graph(fn)
        except RuntimeError as e:  # the call syncs with the host or copies from it
            # a failed capture can leave the process unable to capture again (and its pool
            # allocated): time everything after it directly, and say so
            _CAPTURE_BROKEN = True
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"   note: capture failed ({first[:100]}); this and later calls are timed directly", file=sys.stderr)
        else:
            ms = triton.testing.do_bench(g.replay, warmup=warmup_ms, rep=rep_ms, return_mode="median")
            return Timing(ms=float(ms), timer="cuda-graph-do_bench", reps=-1)
    ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    return Timing(ms=float(ms), timer="cuda-do_bench", reps=-1)


def time_cpu(fn: Callable[[], object], warmup: int = 1, reps: int = 5) -> Timing:
    """Median host time of ``fn`` on the CPU (smoke profile; not a performance claim)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return Timing(ms=statistics.median(samples), timer="cpu-perf_counter", reps=reps)


def time_fn(fn: Callable[[], object], device: torch.device, graph: bool = True, **kw: float) -> Timing:
    """Device-appropriate timer: ``time_gpu`` on CUDA, ``time_cpu`` elsewhere."""
    if device.type == "cuda":
        return time_gpu(fn, graph=graph, **kw)
    return time_cpu(fn)
