"""The benchmark regression gate itself: pytest-benchmark's ``--benchmark-compare-fail`` against
synthetic saved runs, and the refusal to compare runs from different GPUs
(``tests/benchmarks/conftest.py``). Runs a throwaway benchmark (a fixed 10 ms sleep, timing
enabled even on a CPU) in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytest_benchmark")
from pytest_benchmark.utils import get_machine_id  # noqa: E402

from tests.benchmarks import machine_info  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SLEEP_S = 0.01
CONFTEST = """\
from tests.benchmarks.conftest import (  # noqa: F401
    pytest_benchmark_compare_machine_info,
    pytest_benchmark_update_machine_info,
)
"""
BENCH = f"""\
import time


def test_sleep(benchmark):
    benchmark.pedantic(time.sleep, args=({SLEEP_S},), rounds=5, warmup_rounds=1, iterations=1)
"""


def _saved_run(median: float, gpu: str) -> dict:
    stats = {
        "min": median,
        "max": median,
        "mean": median,
        "stddev": 0.0,
        "rounds": 5,
        "median": median,
        "iqr": 0.0,
        "q1": median,
        "q3": median,
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "outliers": "0;0",
        "ld15iqr": median,
        "hd15iqr": median,
        "ops": 1.0 / median,
        "total": 5 * median,
        "iterations": 1,
    }
    bench = {
        "group": None,
        "name": "test_sleep",
        "fullname": "test_bench_sleep.py::test_sleep",
        "params": None,
        "param": None,
        "extra_info": {},
        "options": {},
        "stats": stats,
    }
    info = {**machine_info(), "gpu": gpu}
    return {
        "machine_info": info,
        "commit_info": {},
        "benchmarks": [bench],
        "datetime": "2025-01-01T00:00:00+00:00",
        "version": "5.2.3",
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gate")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_bench_sleep.py").write_text(BENCH)
    here = machine_info()["gpu"]
    other = "NVIDIA H100 80GB HBM3" if here != "NVIDIA H100 80GB HBM3" else "NVIDIA A100-SXM4-80GB"
    runs = {
        "0001_faster": _saved_run(0.008, here),  # current (10 ms) is 25% slower than this
        "0002_same": _saved_run(0.0125, here),  # current is faster than this
        "0003_othergpu": _saved_run(0.0125, other),
    }
    store = root / "storage" / get_machine_id()
    store.mkdir(parents=True)
    for name, run in runs.items():
        (store / f"{name}.json").write_text(json.dumps(run, indent=2))
    return root


def _compare(project: Path, against: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        str(project / "pytest.ini"),
        "--rootdir",
        str(project),
        "--benchmark-enable",
        f"--benchmark-storage={project / 'storage'}",
        f"--benchmark-compare={against}",
        "--benchmark-compare-fail=median:10%",
        "test_bench_sleep.py",
    ]
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)


def test_gate_fails_on_25_percent_slower(project):
    res = _compare(project, "0001")
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "Performance has regressed" in out, out


def test_gate_passes_against_same_speed(project):
    res = _compare(project, "0002")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "1 passed" in out, out


def test_gate_refuses_other_gpu(project):
    res = _compare(project, "0003")
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "refusing to compare benchmarks across GPUs" in out, out
    assert "1 passed" not in out, out
