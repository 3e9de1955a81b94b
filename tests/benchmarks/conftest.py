"""Benchmark session setup: CPU mode, machine info of saved runs, the per-GPU compare guard, and
the copy-bandwidth ceiling measured once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.benchmarks import CLOCK, DEVICE, ON_GPU, check_same_gpu
from tests.benchmarks import machine_info as bench_machine_info

HERE = Path(__file__).resolve().parent

if not ON_GPU:  # before anything imports triton (tests/conftest.py does the same)
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _only_benchmarks(config: pytest.Config) -> bool:
    """Whether every path given on the command line lies inside tests/benchmarks."""
    base = Path(config.invocation_params.dir)
    args = [a.split("::")[0] for a in config.args] or ["."]
    return all(p == HERE or HERE in p.parents for p in ((base / a).resolve() for a in args))


def pytest_configure(config: pytest.Config) -> None:
    if ON_GPU:
        # tests/conftest.py turns the Triton interpreter on for the unit tests; a benchmark run on
        # a GPU needs compiled kernels (set TRITON_INTERPRET=0 yourself for a mixed run)
        if _only_benchmarks(config) and os.environ.get("TRITON_INTERPRET") == "1":
            os.environ["TRITON_INTERPRET"] = "0"
        return
    # CPU: every benchmark runs once, untimed, at tiny shapes (--benchmark-enable overrides)
    if not config.getoption("benchmark_enable", False):
        config.option.benchmark_disable = True
        bs = getattr(config, "_benchmarksession", None)  # this conftest loaded after the plugin
        if bs is not None:
            bs.disabled = True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a GPU every benchmark here is timed by repro.timing.DeviceClock: pytest-benchmark's stats
    are then device seconds per call (tests/benchmarks/__init__.py)."""
    if not ON_GPU:
        return
    for item in items:
        if HERE in Path(item.path).resolve().parents and "benchmark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.benchmark(timer=CLOCK))


def pytest_benchmark_update_machine_info(config, machine_info: dict) -> None:
    machine_info.update(bench_machine_info())


def pytest_benchmark_update_commit_info(config, commit_info: dict) -> None:
    """A copy of the tree without its own git history (a lent GPU box) names its commit through
    ``REPRO_GIT_COMMIT``, as the suites' provenance does."""
    if os.environ.get("REPRO_GIT_COMMIT"):
        commit_info["id"] = os.environ["REPRO_GIT_COMMIT"]
        commit_info["dirty"] = False
        commit_info["source"] = "REPRO_GIT_COMMIT"


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark) -> None:
    check_same_gpu(machine_info, compared_benchmark.get("machine_info", {}), str(benchmarksession.storage))


@pytest.fixture(autouse=True)
def _compiled_kernels_on_gpu() -> None:
    if ON_GPU and os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("GPU benchmarks need compiled Triton kernels: run `pytest tests/benchmarks` on its own")


@pytest.fixture(scope="session")
def copy_gbps(request) -> float | None:
    """Device-to-device copy bandwidth (GB/s, read + write), measured once when timing is on."""
    bs = request.config._benchmarksession
    if bs.disabled or bs.skip:
        return None
    from repro.roofline import measure_ceilings

    ceil = measure_ceilings(DEVICE)
    if ON_GPU:
        torch.cuda.empty_cache()
    return ceil.copy_gbps
