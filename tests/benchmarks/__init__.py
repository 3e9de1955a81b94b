"""pytest-benchmark regression suite for the kernels (``pytest tests/benchmarks``).

On a CUDA GPU every module runs the papers' shapes and times them (host clock around a call that
ends in ``torch.cuda.synchronize``, plus CUDA events of the same rounds in ``extra_info``); on a
CPU every benchmark runs once at a tiny shape (Triton through the interpreter), timing disabled,
so CI checks that the benchmarks and their correctness checks still work.

Shared helpers live here (conftest modules should not be imported by tests).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch

from repro.provenance import device_slug, gpu_name, versions
from repro.timing import l2_flusher

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
GPU_ROUNDS, GPU_WARMUP = 30, 5


def paper_params(cases: Iterable[tuple[str, Any, Any]]) -> list[Any]:
    """``(id, paper value, tiny value)`` -> pytest params: the paper value on a GPU, else the tiny
    one under the same id with ``-tiny`` appended."""
    if ON_GPU:
        return [pytest.param(full, id=pid) for pid, full, _ in cases]
    return [pytest.param(tiny, id=f"{pid}-tiny") for pid, _, tiny in cases]


def driver_version() -> str:
    """NVIDIA driver version from nvidia-smi, or ``none``."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return "none"
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "none"
    return out.strip().splitlines()[0].strip() if out.strip() else "none"


def machine_info() -> dict[str, str]:
    """What a saved benchmark run must record to be comparable: GPU (or ``cpu``) and software."""
    v = versions()
    return {
        "gpu": gpu_name(DEVICE) or "cpu",
        "gpu_slug": device_slug(DEVICE),
        "gpu_driver": driver_version(),
        "torch": v["torch"],
        "triton": v["triton"],
        "cuda": v["cuda"],
        "cusparselt": v["cusparselt"],
    }


def check_same_gpu(current: dict, saved: dict, source: str = "") -> None:
    """Refuse (pytest.UsageError) to compare a run with one saved on another GPU (or on none)."""
    now = current.get("gpu")
    then = saved.get("gpu")
    if now != then:
        where = f" in {source}" if source else ""
        raise pytest.UsageError(
            f"refusing to compare benchmarks across GPUs: the saved run{where} was recorded on "
            f"gpu={then!r}, this machine is gpu={now!r}. Baselines are per GPU: compare against "
            f"--benchmark-storage=results/benchmarks/<gpu-slug> of this GPU "
            f"(make one with scripts/bench_baseline.sh)."
        )


def run_benchmark(
    benchmark,
    fn: Callable[[], Any],
    *,
    nbytes: int | None = None,
    flops: float | None = None,
    copy_gbps: float | None = None,
    setup: Callable[[], None] | None = None,
) -> Any:
    """Time ``fn`` (already checked for correctness by the caller) and record throughput.

    GPU: ``benchmark.pedantic`` with one iteration per round; each round's setup flushes L2 and
    synchronises, the timed call synchronises at its end, and CUDA events around the call give
    the device time of the same rounds (``extra_info['cuda_event_median_ms']``, the basis of the
    GB/s figures). CPU with timing disabled: one untimed call. Returns ``fn``'s last result.
    """
    user_setup = setup

    def setup() -> None:  # pedantic treats a truthy setup() result as (args, kwargs)
        if user_setup is not None:
            user_setup()

    info = benchmark.extra_info
    info["device"] = device_slug(DEVICE)
    if nbytes is not None:
        info["bytes"] = int(nbytes)
    if benchmark.disabled:
        return benchmark.pedantic(fn, setup=setup, rounds=1, iterations=1)
    if not ON_GPU:  # host timer on a CPU (--benchmark-enable): not a performance claim
        info["timer"] = "host-perf_counter"
        out = benchmark.pedantic(fn, setup=setup, rounds=3, warmup_rounds=1, iterations=1)
        ms = benchmark.stats.stats.median * 1e3
    else:
        flush = l2_flusher("read")  # clean eviction, as the suites' timer (repro/timing.py says why)
        samples: list[float] = []

        def _setup() -> None:
            setup()
            flush()
            torch.cuda.synchronize()

        def _timed() -> Any:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            res = fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
            return res

        out = benchmark.pedantic(_timed, setup=_setup, rounds=GPU_ROUNDS, warmup_rounds=GPU_WARMUP, iterations=1)
        ms = statistics.median(samples[-GPU_ROUNDS:])
        info["timer"] = "host-sync+cuda-events"
        info["cuda_event_median_ms"] = ms
        info["host_median_ms"] = benchmark.stats.stats.median * 1e3
    info["median_ms"] = ms
    if nbytes is not None and ms > 0:
        gbps = nbytes / (ms * 1e-3) / 1e9
        info["gbps"] = gbps
        if copy_gbps:
            info["copy_gbps"] = copy_gbps
            info["pct_of_copy"] = 100.0 * gbps / copy_gbps
    if flops is not None and ms > 0:
        info["tflops"] = flops / (ms * 1e-3) / 1e12
    return out
