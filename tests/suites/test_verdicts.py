"""Statuses a reader can trust: an artifact is "reproduced" only where our GPU number matches the
paper's within a stated tolerance; smoke rows are never a verdict; diagrams have nothing to
reproduce; every suite gives a verdict with a caveat."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.dashboard import _status
from suites import SUITES, get_suite
from suites._common import Verdict, ratio_verdict


def test_ratio_verdict_within_above_below_and_missing():
    assert ratio_verdict(1.45, 1.5, 0.05, "x").status == "reproduced"
    assert ratio_verdict(2.0, 1.5, 0.05, "x").status == "exceeds"
    assert ratio_verdict(1.0, 1.1, 0.05, "x").status == "falls short"
    assert ratio_verdict(float("nan"), 1.1, 0.05, "x").status == "not comparable"
    v = ratio_verdict(1.0, 1.1, 0.05, "H100 vs RTX 3090")
    assert "1.1" in v.caveat and "H100" in v.caveat and "5%" in v.caveat
    with pytest.raises(ValueError, match="status"):
        Verdict("sort of", "")


def _rows(device: str, profile: str) -> pd.DataFrame:
    return pd.DataFrame({"device": [device], "profile": [profile], "gpu_name": ["x"]})


def test_status_is_never_a_verdict_without_gpu_rows():
    assert _status(None, None, "overview of fast (diagram)")[0] == "nothing to reproduce"
    assert _status(None, None, "memory layout no numeric values (layout symbols only)")[0] == "nothing to reproduce"
    assert _status(None, None, "glue scores")[0] == "not yet"
    assert _status(_rows("cpu", "smoke"), get_suite("table2"))[0] == "no GPU run"


class _Broken:
    @staticmethod
    def verdict(df):  # noqa: ANN001, ANN205
        raise KeyError("x")


def test_a_failing_verdict_says_so_instead_of_breaking_the_site():
    status, caveat = _status(_rows("nvidia-h100", "full"), _Broken())
    assert status == "not comparable" and "verdict failed" in caveat


@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_gives_a_verdict(suite):
    assert callable(get_suite(suite).verdict)


def test_worst_and_precision_caveat():
    from suites._common import precision_caveat, worst

    v = [ratio_verdict(1.0, 1.0, 0.05, ""), ratio_verdict(2.0, 1.0, 0.05, "")]
    assert worst(v) == "exceeds"
    assert worst([*v, ratio_verdict(0.5, 1.0, 0.05, "")]) == "falls short"
    assert precision_caveat(pd.DataFrame({"dtype": ["bf16-amp", "bf16"]})) == "bf16 vs the paper's fp16"
    assert precision_caveat(pd.DataFrame({"dtype": ["fp16-amp"]})) == "fp16 vs the paper's fp16"


def test_table8_verdict_states_measured_ceiling_and_dtype():
    """The caveat is computed from the rows (ceiling range, GPU, dtype), never typed in."""
    rows = []
    for model, batch, fst, ceil in (("gpt2-124m", 16, 1.0, 1.02), ("gpt2-350m", 16, 1.06, 1.08)):
        shape = f"{model}/N={batch}/seq=1024"
        rows += [
            {"shape": shape, "method": "fst", "metric": "speedup_vs_dense", "value": fst},
            {"shape": shape, "method": "fst", "metric": "gemm_ceiling_speedup", "value": ceil},
            {"shape": shape, "method": "dense", "metric": "step_time_amortized", "value": 50.0},
        ]
    df = pd.DataFrame(rows).assign(dtype="fp16", gpu_name="Some GPU")
    v = get_suite("table8").verdict(df)
    assert v.status == "falls short"
    assert "1.02-1.08x" in v.caveat and "Some GPU" in v.caveat and "fp16 vs the paper's fp16" in v.caveat


def test_figure3_gives_the_geometric_mean_beside_the_papers_average():
    """FAST's mean mask-generation speedup is the paper's arithmetic mean over patterns, which one
    pattern (TBS(8): the baselines' swap selection) dominates; the table adds the geometric mean,
    the verdict states both, and the figure draws neither as a pattern."""
    import math
    from pathlib import Path

    from repro.results import read_results
    from suites import figure3

    path = Path(__file__).resolve().parents[2] / "results" / "nvidia-h100-80gb-hbm3" / "figure3.csv"
    if not path.exists():
        pytest.skip("no stored H100 figure3 results")
    t = figure3.compare(read_results(path))
    sub = t[t["model"] == "map-neo-460m"]
    pats = sub[~sub["pattern"].astype(str).str.contains(f"average|geometric|paper|{figure3.TRAINING_ROW}")]
    geo = sub[sub["pattern"] == "geometric mean (ours, mask generation)"].iloc[0]
    avg = sub[sub["pattern"] == "average (ours, mask generation)"].iloc[0]
    vals = pats["fast_vs_torch"].dropna().astype(float)
    assert math.isclose(geo["fast_vs_torch"], math.exp(vals.map(math.log).mean()), rel_tol=1e-9)
    assert geo["fast_vs_torch"] <= avg["fast_vs_torch"]
    assert "geometric means" in figure3.verdict(read_results(path)).caveat


def test_figure3_table_shows_the_training_step_beside_mask_generation():
    """The training-step rows (masks regenerated in a real step) appear in the table with FAST's
    ratio on mask time and on step time, whichever way it goes, and stay out of the means."""
    import math

    from suites import figure3

    def row(method: str, variant: str, shape: str, metric: str, value: float) -> dict:
        return {"method": method, "variant": variant, "shape": shape, "metric": metric, "value": value}

    rows = [row(m, "TBS(4,4)", "map-neo-460m", "time", v) for m, v in (("torch", 40.0), ("fast", 2.0))]
    rows.append(row("fast", "TBS(4,4)", "map-neo-460m", "speedup_vs_torch", 20.0))
    rows += [
        row(m, "TBS(8,8) every=1", "map-neo-460m", metric, v)
        for m, metric, v in (
            ("torch", "mask_time_per_step", 300.0),
            ("vegeta", "mask_time_per_step", 250.0),
            ("fast", "mask_time_per_step", 500.0),  # FAST slower: shown as it is
            ("torch", "step_time", 400.0),
            ("vegeta", "step_time", 350.0),
            ("fast", "step_time", 600.0),
        )
    ]
    t = figure3.compare(pd.DataFrame(rows))
    train = t[t["pattern"].astype(str).str.startswith(figure3.TRAINING_ROW)].set_index("pattern")
    mask = train.loc["training step TBS(8,8) every=1: mask ms per step"]
    assert mask["strongest_baseline"] == "vegeta"
    assert math.isclose(mask["fast_vs_strongest"], 0.5) and math.isclose(mask["fast_vs_torch"], 0.6)
    assert math.isclose(train.loc["training step TBS(8,8) every=1: step ms"]["fast_vs_vegeta"], 350 / 600)
    avg = t[t["pattern"] == "average (ours, mask generation)"].iloc[0]
    assert avg["fast_vs_torch"] == 20.0  # the training rows stay out of the mean


def test_table5_missing_paper_gap_is_not_comparable(monkeypatch):
    """A NaN paper gap compared as "exceeds" (NaN differences fall to the else branch)."""
    import suites.table5 as t5

    df = pd.DataFrame(
        {
            "metric": ["val_loss"] * 2,
            "method": ["dense", "fst"],
            "value": [3.30, 3.31],
            "dtype": ["bf16"] * 2,
            "device": ["nvidia-h100"] * 2,
            "profile": ["full"] * 2,
            "shape": ["gpt2-124m/9800000tok"] * 2,
        }
    )
    monkeypatch.setattr(t5, "_paper", lambda: {"dense": 2.85})  # the fst value missing
    assert t5.verdict(df).status == "not comparable"


def test_table5_one_seed_has_no_spread_not_a_zero_one():
    """With one seed per method the spread read 0.000, as if the seeds agreed exactly."""
    import suites.table5 as t5

    def frame(values: dict[str, list[float]]) -> pd.DataFrame:
        pairs = [(m, v) for m, vs in values.items() for v in vs]
        return pd.DataFrame(
            {
                "metric": "val_loss",
                "method": [m for m, _ in pairs],
                "value": [v for _, v in pairs],
                "dtype": "bf16",
                "device": "nvidia-h100",
                "profile": "full",
                "shape": "gpt2-124m/9800000tok",
            }
        )

    one = frame({"dense": [3.30], "fst": [3.31]})
    assert t5.compare(one)["ours_spread"].isna().all()
    assert "n/a (one seed)" in t5.summary(one) and "0.000" not in t5.summary(one)
    assert "seed spread not measured" in t5.verdict(one).caveat
    two = frame({"dense": [3.30, 3.32], "fst": [3.31, 3.35]})
    assert "seed spread up to 0.040" in t5.verdict(two).caveat
