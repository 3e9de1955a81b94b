"""suites.table2: a ratio to approx2 compares two sides timed alike, in a run and in stored rows."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from repro.kbench.transposable import TRANSPOSABLE
from repro.timing import Timing
from suites import table2


class _Ctx:
    """Enough of RunContext for table2._run_case: a graph-timed call takes 1 ms, an uncaptured
    one 3 ms (launches and host syncs), so a ratio across the two timers is off by 3x."""

    device = torch.device("cpu")
    ceilings = SimpleNamespace(copy_gbps=1000.0)

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.results = self

    def add(self, method, shape, dtype, metric, value, unit, **kw) -> None:  # noqa: ANN001
        self.rows.append({"method": method, "shape": shape, "dtype": dtype, "metric": metric, "value": value, **kw})

    def time_checked(self, fn, check, what: str, graph: bool = True) -> Timing:  # noqa: ANN001
        assert check(fn()), what
        return Timing(ms=1.0 if graph else 3.0, timer="graph" if graph else "uncaptured", reps=1)

    def add_bandwidth_rows(self, method, shape, dtype, nbytes, t, *, verified, paper_unit=None) -> float:  # noqa: ANN001
        bw = nbytes / t.ms / 1e6
        self.add(method, shape, dtype, "throughput", bw / 1e3, "TB/s", timer=t.timer, verified=verified)
        return bw

    def check(self, ok: bool, what: str) -> None:
        assert ok, what

    def log(self, msg: str) -> None:
        pass


def test_a_ratio_to_an_uncapturable_approx2_times_ours_uncaptured_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above a size approx2 syncs with the host and is timed uncaptured; the ratio had divided its
    time by our kernel's graph replay (365x on the H100 at 8192x2048 fp16)."""
    variants = dict(TRANSPOSABLE.variants)
    variants["approx2"] = dataclasses.replace(variants["approx2"], graph=lambda inp: False)
    monkeypatch.setattr(TRANSPOSABLE, "variants", variants)
    case = TRANSPOSABLE.cases("smoke")[0]
    ctx = _Ctx()
    table2._run_case(ctx, case.shape, case.dtype, TRANSPOSABLE.inputs(case, ctx.device, torch.Generator()))
    ratio = {r["method"]: r for r in ctx.rows if r["metric"] == "speedup_vs_approx2"}
    assert ratio["exhaustive"]["value"] == 1.0 and ratio["exhaustive"]["timer"] == "uncaptured"  # 3 ms / 3 ms
    assert ratio["exhaustive_torch"]["value"] == 1.0  # both uncaptured from the start
    thr = {r["method"]: r["timer"] for r in ctx.rows if r["metric"] == "throughput"}
    assert thr == {"approx2": "uncaptured", "exhaustive": "graph", "exhaustive_torch": "uncaptured"}


def _stored(timer_ours: str, ratio_timer: object) -> pd.DataFrame:
    rows = [
        ("approx2", "throughput", 0.01, "uncaptured"),
        ("exhaustive", "throughput", 2.0, timer_ours),
        ("exhaustive", "speedup_vs_approx2", 150.0, ratio_timer),
    ]
    return pd.DataFrame(
        [
            {"method": m, "metric": k, "value": v, "timer": t, "shape": "8192x2048", "dtype": "fp16"}
            for m, k, v, t in rows
        ]
    )


def test_compare_leaves_out_a_ratio_of_two_timers() -> None:
    """Older runs' cells where approx2 ran uncaptured and ours from a graph: no ratio is read."""

    def ratio(df: pd.DataFrame) -> float:
        return float(table2.compare(df).set_index(["shape", "dtype"]).loc[("8192x2048", "fp16"), "our_ratio"])

    assert ratio(_stored("graph", float("nan"))) != ratio(_stored("graph", float("nan")))  # NaN
    assert ratio(_stored("graph", "uncaptured")) == 150.0  # a newer run's like-timed row
    assert ratio(_stored("uncaptured", float("nan"))) == pytest.approx(200.0)  # both alike: the throughputs' ratio
