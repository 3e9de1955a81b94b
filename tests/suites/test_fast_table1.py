"""suites.fast_table1 (FAST Table I at reduced scale): the smoke profile runs end to end through the
CLI (four masked Llama runs, lm-eval zero-shot on the fixture sets), its rows are well formed, and
compare / summary / verdict work on them; the verdict never claims a match at this scale."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from repro.results import read_results
from suites import get_suite

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> pd.DataFrame:
    results = tmp_path_factory.mktemp("fast_table1")
    env = dict(os.environ, PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, "-m", "repro", "run", "fast_table1", "--profile", "smoke", "--device", "cpu"]
    cmd += ["--results-dir", str(results), "--no-figure"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return read_results(results / "cpu" / "fast_table1.csv")


def test_every_mask_is_trained_and_scored(rows):
    suite = get_suite("fast_table1")
    assert set(rows["method"]) >= set(suite.MASKS)
    assert (rows["profile"] == "smoke").all() and (rows["device"] == "cpu").all()
    assert rows["value"].map(lambda v: v == v and abs(v) != float("inf")).all()  # finite, no NaN
    for task in ("piqa", "arc_e", "arc_c", "lambada"):  # every mask scored on every task, with its CI
        for metric in (f"{task}_acc", f"{task}_acc_ci_low", f"{task}_acc_ci_high"):
            got = rows[rows["metric"] == metric].set_index("method")["value"]
            assert set(got.index) == set(suite.MASKS), metric
            assert got.between(0.0, 1.0).all(), metric
        lo, acc, hi = (
            rows[rows["metric"] == f"{task}_acc{s}"].set_index("method")["value"] for s in ("_ci_low", "", "_ci_high")
        )
        assert ((lo <= acc) & (acc <= hi)).all(), task


def test_compare_summary_and_verdict_on_smoke_rows(rows):
    suite = get_suite("fast_table1")
    t = suite.compare(rows)
    assert not t.empty
    assert isinstance(suite.summary(rows), str)
    v = suite.verdict(rows)
    assert v.status == "not comparable" and v.caveat


def test_verdict_bounds_the_gaps_over_measured_cells_and_names_the_missing_ones():
    """A missing cell must not vanish from an "at most" bound: the verdict names it."""
    suite = get_suite("fast_table1")
    rows = [{"method": "dense", "metric": "val_loss", "shape": "llama-tiny/1000tok", "value": 3.0}]
    for mask in suite.MASKS:
        for task in suite.TASKS.values():
            if (mask, task) == ("us", "piqa"):
                continue  # its run died before scoring
            acc = 0.5 if mask == "dense" else 0.52
            rows += [{"method": mask, "metric": f"{task}{s}", "shape": "", "value": acc} for s in ("_acc",)]
    v = suite.verdict(pd.DataFrame(rows))
    assert v.status == "not comparable"
    assert "at most 0.020 over the 11 cells where a model scored above 0" in v.caveat
    assert "not measured: us/piqa" in v.caveat and "chance: piqa 0.5" in v.caveat


def test_verdict_leaves_0_against_0_out_of_the_bound_and_names_cells_below_chance():
    suite = get_suite("fast_table1")
    rows = [{"method": "dense", "metric": "val_loss", "shape": "llama-tiny/1000tok", "value": 3.0}]
    for mask in suite.MASKS:
        for task in suite.TASKS.values():
            acc = {"lambada": 0.0, "arc_c": 0.19}.get(task, 0.5 if mask == "dense" else 0.51)
            rows += [{"method": mask, "metric": f"{task}_acc", "shape": "", "value": acc}]
            rows += [{"method": mask, "metric": f"{task}_acc_ci_high", "shape": "", "value": acc + 0.03}]
    v = suite.verdict(pd.DataFrame(rows))
    assert "at most 0.010 over the 9 cells where a model scored above 0 (3 cells are 0 against 0)" in v.caveat
    assert "below chance beyond the CI: dense/arc_c 0.190" in v.caveat and "lambada 0.000" not in v.caveat
