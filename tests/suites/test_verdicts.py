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


def test_a_ratio_more_than_twice_the_papers_is_not_comparable():
    """Hu Table 2 read "exceeds" at 184x against the paper's 3.58x: the gap measured our slow baseline."""
    from suites._common import baseline_bound_verdict

    v = baseline_bound_verdict(184.0, 3.58, 0.2, "why", "our baseline at 0.003 TB/s")
    assert v.status == "not comparable" and "our baseline at 0.003 TB/s" in v.caveat and "184x" in v.caveat
    assert baseline_bound_verdict(5.0, 3.58, 0.2, "why", "b").status == "exceeds"  # under twice: a real exceed
    assert baseline_bound_verdict(3.6, 3.58, 0.2, "why", "b").status == "reproduced"
    assert baseline_bound_verdict(1.0, 3.58, 0.2, "why", "b").status == "falls short"


def test_table2_medians_cover_the_same_cells_on_both_sides(monkeypatch):
    """Our median over the cells we measured against the paper's over all its cells read one cell
    28% off as -16% ("reproduced")."""
    import suites.table2 as t2

    t = pd.DataFrame({"our_ratio": [2.88, float("nan"), float("nan")], "paper_ratio": [4.0, 3.0, 3.4],
                      "our_approx2_TBps": [0.01, float("nan"), float("nan")]})  # fmt: skip
    monkeypatch.setattr(t2, "compare", lambda df: t)
    v = t2.verdict(pd.DataFrame({"gpu_name": ["NVIDIA H200"]}))
    assert v.status == "falls short" and "-28%" in v.caveat and "over 1 cells" in v.caveat and "H200" in v.caveat


def test_table7_effects_inside_the_noise_are_not_a_reproduction(monkeypatch):
    """Effects of -0.006 and -0.009 nats (one seed each) read "reproduced" on their sign alone."""
    import suites.table7 as t7

    def with_effects(decay: float, mvue: float, ft: float) -> Verdict:
        e = pd.DataFrame({"technique": ["decay", "mvue", "dense_ft"], "ours_delta": [decay, mvue, ft]})
        monkeypatch.setattr(t7, "effects", lambda t: e)
        monkeypatch.setattr(t7, "compare", lambda df: df)
        monkeypatch.setattr(t7.P, "scale_note", lambda df: "tiny")
        return t7.verdict(pd.DataFrame())

    v = with_effects(-0.006, 0.014, -0.009)
    assert v.status == "not comparable" and "within the 0.04-nat run-to-run noise" in v.caveat
    assert with_effects(-0.1, 0.014, -0.09).status == "reproduced"
    assert with_effects(0.1, 0.014, -0.09).status == "falls short"
    assert with_effects(-0.1, 0.2, -0.09).status == "falls short"


def test_figure6_block_claim_is_judged_on_the_median_and_empty_frames_do_not_crash(monkeypatch):
    """ "In most cases ... 1.2x" was judged on the best shape alone (1.19x, while the median was 1.04x)."""
    import suites.figure6 as f6

    t = pd.DataFrame({"method": ["fst"] * 4, "kind": ["ffn", "block", "block", "block"],
                      "speedup": [1.49, 1.19, 1.04, 1.02]})  # fmt: skip
    monkeypatch.setattr(f6, "compare", lambda df: t)
    v = f6.verdict(pd.DataFrame({"gpu_name": ["g"], "dtype": ["bf16"]}))
    assert v.status == "falls short" and "block median ours 1.04" in v.caveat and "1 of 3 block shapes" in v.caveat
    monkeypatch.setattr(f6, "compare", lambda df: pd.DataFrame())
    assert f6.verdict(pd.DataFrame()).status == "not comparable"


def test_fast_e2e_without_fast_rows_does_not_crash(monkeypatch):
    import suites.fast_figure3_e2e as e2e

    monkeypatch.setattr(e2e, "compare", lambda df: pd.DataFrame({"model": ["m"], "method": ["torch"]}))
    assert e2e.summary(pd.DataFrame()) == "see page"
    assert e2e.verdict(pd.DataFrame()).status == "not comparable"


def test_no_effect_claims_are_two_sided():
    """ "Within 10% of STE's flip rate" was tested as > 0.9: a flip rate tripled (3.0) passed."""
    from repro.paper import claim_holds, load_claims

    c = load_claims("hu2024", "figure2").set_index("claim").loc["weights_no_effect"]
    assert claim_holds(c["relation"], 1.01, c["threshold"]) is True
    assert claim_holds(c["relation"], 3.0, c["threshold"]) is False
    assert claim_holds(c["relation"], 0.85, c["threshold"]) is False


def test_table5_zero_gap_does_not_reproduce_the_papers_cost():
    """GAP_TOL was 0.05 nats, more than the paper's 0.045 gap: a run where fst cost nothing passed."""
    import suites.table5 as t5

    def frame(dense: float, fst: float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "metric": "val_loss",
                "method": ["dense", "dense", "fst", "fst"],
                "value": [dense, dense, fst, fst],
                "dtype": "bf16",
                "device": "nvidia-h100",
                "profile": "full",
                "shape": "gpt2-124m/9800000tok",
            }
        )

    paper_gap = t5._paper()["ours"] - t5._paper()["dense"]
    assert paper_gap > t5.GAP_TOL
    assert t5.verdict(frame(5.2, 5.2)).status == "exceeds"  # no cost at all: better than the paper
    assert t5.verdict(frame(5.2, 5.2 + paper_gap)).status == "reproduced"
    assert t5.verdict(frame(5.2, 5.2 + 3 * paper_gap)).status == "falls short"
