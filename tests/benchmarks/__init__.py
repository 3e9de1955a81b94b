"""pytest-benchmark regression suite for the kernels (``pytest tests/benchmarks``).

What pytest-benchmark stores and compares is **device time per call**: on a CUDA GPU every
benchmark captures its call in a CUDA graph (:func:`repro.timing.time_fn_kept`, the suites' timer),
then ``benchmark.pedantic`` runs rounds of ``iterations`` back-to-back replays, L2 flushed before
each, under :class:`repro.timing.DeviceClock` (the benchmark's timer: it reads the summed CUDA-event
time of the replays, so launch and synchronise latency never enter). ``stats.median`` is the median
over rounds of the mean device time per call. On a CPU every benchmark runs once at a tiny shape
(Triton through the interpreter), timing disabled, so CI checks that the benchmarks and their
correctness checks still work.

Kernels with a declaration in :mod:`repro.kbench` (transposable, geglu, mvue, masked_decay,
nm_mask) are benchmarked from it (:func:`declared_params`, :func:`run_declared`): the same inputs,
check and variants as the suites.

Shared helpers live here (conftest modules should not be imported by tests).
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch

from repro.kbench.core import Case, KernelBench, Variant, clone_output
from repro.provenance import device_slug, gpu_name, versions
from repro.suite import poison
from repro.timing import DeviceClock, time_fn_kept

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
GPU_ROUNDS = 15  # rounds per benchmark; stats are over rounds
ROUND_MS = 10.0  # device time of the timed calls in one round (the L2 flushes between them excluded)
MIN_ITERATIONS, MAX_ITERATIONS = 3, 200
CLOCK = DeviceClock("read")  # the GPU benchmarks' pytest-benchmark timer (conftest.py marks them)
PROFILE = "full" if ON_GPU else "smoke"  # repro.kbench profile: paper shapes on a GPU, tiny on a CPU


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


def iterations_for(ms: float) -> int:
    """Timed calls per round: about ``ROUND_MS`` of device time, within [MIN, MAX]_ITERATIONS."""
    return int(min(MAX_ITERATIONS, max(MIN_ITERATIONS, math.ceil(ROUND_MS / max(ms, 1e-4)))))


def run_benchmark(
    benchmark,
    fn: Callable[[], Any],
    *,
    nbytes: int | None = None,
    flops: float | None = None,
    copy_gbps: float | None = None,
    setup: Callable[[], object] | None = None,
    graph: bool = True,
    recheck: Callable[[Any], bool] | None = None,
) -> Any:
    """Time ``fn`` (already checked for correctness by the caller) and record throughput.

    GPU: :func:`repro.timing.time_fn_kept` captures ``fn`` in a CUDA graph (``graph``; a call that
    syncs with the host is timed uncaptured, and ``extra_info['timer']`` says so) and gives the
    suites' median; then ``benchmark.pedantic`` runs ``GPU_ROUNDS`` rounds of ``iterations``
    replays under :data:`CLOCK`, so the stored stats are device seconds per call. ``setup`` runs
    untimed before every call (restoring an in-place operand). CPU with timing disabled: one
    untimed call. ``recheck(out)``: afterwards the timed call's own output is poisoned
    (:func:`repro.suite.poison`), recomputed by the timed call (after ``setup``) and must pass, as
    the suites' ``RunContext.time_checked``. Returns that output.
    """
    info = benchmark.extra_info
    info["device"] = device_slug(DEVICE)
    if nbytes is not None:
        info["bytes"] = int(nbytes)
    held: list[Any] = [None]

    def call() -> Any:
        held[0] = fn()
        return held[0]

    def pre() -> None:  # pedantic treats a truthy setup() result as (args, kwargs)
        if setup is not None:
            setup()

    timed: Callable[[], Any] = call
    ms: float | None = None
    if benchmark.disabled:
        benchmark.pedantic(call, setup=pre, rounds=1, iterations=1)
    elif not ON_GPU:  # host timer on a CPU (--benchmark-enable): not a performance claim
        info["timer"] = "host-perf_counter"
        benchmark.pedantic(call, setup=pre, rounds=3, warmup_rounds=1, iterations=1)
        ms = benchmark.stats.stats.median * 1e3
    else:
        if getattr(benchmark, "_timer", CLOCK) is not CLOCK:
            raise pytest.UsageError(
                "GPU benchmarks must run under tests/benchmarks/conftest.py, which makes "
                "repro.timing.DeviceClock their timer (pytest.mark.benchmark(timer=CLOCK))"
            )
        pre()
        t, timed = time_fn_kept(call, DEVICE, graph=graph)
        n = iterations_for(t.ms)
        benchmark.pedantic(CLOCK.wrap(timed, setup), rounds=GPU_ROUNDS, warmup_rounds=1, iterations=n)
        ms = benchmark.stats.stats.median * 1e3
        info["timer"] = f"device-clock/{t.timer}"
        info["iterations"] = n
        info["repro_timing_ms"] = t.ms  # the suites' number: median of single replays
    if ms is not None:
        info["median_ms"] = ms
        if nbytes is not None and ms > 0:
            gbps = nbytes / (ms * 1e-3) / 1e9
            info["gbps"] = gbps
            if copy_gbps:
                info["copy_gbps"] = copy_gbps
                info["pct_of_copy"] = 100.0 * gbps / copy_gbps
        if flops is not None and ms > 0:
            info["tflops"] = flops / (ms * 1e-3) / 1e12
    if recheck is not None:
        poison(held[0])
        pre()
        timed()
        if ON_GPU:
            torch.cuda.synchronize()
        assert recheck(held[0]), "the output of the timed call (poisoned, then recomputed) fails its check"
    return held[0]


def declared_params(kb: KernelBench, profile: str = PROFILE) -> list[Any]:
    """pytest params ``(case, variant)`` of a declaration's regression set, ids ``variant-shape-dtype``."""
    return [pytest.param(case, v, id=f"{v.name}-{case.label}") for case, v in kb.gate_params(profile)]


def run_declared(benchmark, kb: KernelBench, case: Case, variant: Variant, copy_gbps: float | None) -> Any:
    """Benchmark one variant of a declaration on one case: the kernel's precheck, the variant's
    output checked, then timed (:func:`run_benchmark`) and the timed call's own output re-checked
    against the checked one (``kb.same``)."""
    inp = kb.inputs(case, DEVICE)
    if kb.precheck is not None:
        kb.precheck(inp)
    setup = kb.setup(inp) if kb.setup is not None else None
    fn = variant(inp)
    if setup is not None:
        setup()
    out = fn()
    quality = kb.check(inp, variant.name, out)  # CheckFailed (an AssertionError) names what failed
    want = clone_output(out)
    del out
    info = benchmark.extra_info
    info.update(kernel=kb.name, variant=variant.name, baseline=kb.baseline.name, **quality)
    return run_benchmark(
        benchmark,
        fn,
        nbytes=kb.nbytes(inp) if kb.nbytes is not None else None,
        flops=kb.flops(inp) if kb.flops is not None else None,
        copy_gbps=copy_gbps,
        setup=setup,
        graph=variant.graph(inp),
        recheck=lambda o: kb.same(o, want),
    )
