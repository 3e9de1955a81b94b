"""The GLUE suites of Hu et al. (hu_table4, hu_table5_glue, hu_table7_glue): each smoke profile runs
end to end through the CLI into one temporary results folder (the later suites reuse the earlier
ones' runs, as on the GPU), writes well-formed k-fold rows, and its compare / summary / verdict work
on them; the shared statistics (fold t-intervals, paired gaps, claim states) on known inputs."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repro.eval.evalsets import SMOKE_SETS
from repro.results import read_results
from suites import _glue as G
from suites import get_suite

REPO = Path(__file__).resolve().parents[2]
SUITES = ("hu_table4", "hu_table5_glue", "hu_table7_glue")
SET_SIZES = {t: len((SMOKE_SETS / f"glue_{t}.jsonl").read_text().splitlines()) for t in G.TASKS}


def _run(suite: str, results: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, "-m", "repro", "run", suite, "--profile", "smoke", "--device", "cpu"]
    cmd += ["--results-dir", str(results), "--no-figure"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """Results folder and each suite's CLI output, the suites run in order into the same folder."""
    root = tmp_path_factory.mktemp("glue-results")
    return root, {s: _run(s, root) for s in SUITES}


@pytest.mark.slow
@pytest.mark.parametrize("suite", SUITES)
def test_smoke_rows_are_well_formed(smoke, suite):
    root, procs = smoke
    mod = get_suite(suite)
    df = read_results(root / "cpu" / f"{suite}.csv")
    assert set(df["profile"]) == {"smoke"} and df["value"].notna().all()
    glue = G.glue_rows(df)
    methods = sorted(set(glue["method"]))
    runs = df.loc[df["metric"] == "val_loss"]
    assert sorted(set(runs["method"])) == methods  # every fine-tuned model has its pretraining rows
    for rid in runs["variant"]:
        assert (root / "cpu" / "runs" / f"smoke-{rid}" / "checkpoint.pt").is_file()
    k = G.FINETUNE["smoke"]["k"]
    assert glue["variant"].str.contains(f" kfold-validation k={k} n=").all() and set(glue["unit"]) == {"points"}
    assert glue["value"].between(-1e-9, 100 + 1e-9).all()
    for (method, _rid), part in glue.groupby([glue["method"], glue["variant"].str.split(" ").str[0]]):
        metrics = set(part["metric"])
        for task in G.TASKS:
            assert {f"{task}_acc", f"{task}_acc_std", f"{task}_acc_pooled", f"{task}_score_fold0"} <= metrics
            folds = part[part["metric"].str.fullmatch(rf"{task}_acc_fold\d+")]
            assert len(folds) == k, (method, task)
            n = folds["variant"].str.extract(r"n=(\d+)")[0].astype(int)
            assert n.sum() == SET_SIZES[task], (method, task)  # the folds cover the set once
        assert {"mrpc_f1", "mrpc_f1_fold0", "score", "score_ci_low", "score_ci_high"} <= metrics
        score = part.set_index("metric")["value"]
        assert math.isclose(score["score"], np.mean([score[f"score_fold{f}"] for f in range(k)]))
        assert score["score_ci_low"] <= score["score"] <= score["score_ci_high"]
    out = procs[suite].stdout
    assert "paper vs ours" in out and "smoke profile on cpu" in out
    table = mod.compare(df)
    assert not table.empty
    text = mod.summary(df)
    assert "k-fold" in text or "kfold" in text
    v = mod.verdict(df)
    assert v.status == "not comparable" and "not GLUE scores" in v.caveat and "k=2" in v.caveat


@pytest.mark.slow
def test_hu_table4_compares_every_recipe_with_the_paper(smoke):
    root, _ = smoke
    mod = get_suite("hu_table4")
    df = read_results(root / "cpu" / "hu_table4.csv")
    t = mod.compare(df)
    assert set(t["method"]) == set(mod.RUNS) and set(t["task"]) == {*G.TASKS, "score"}
    s = t[t["task"] == "score"].set_index("method")
    assert np.isnan(s.loc["srste", "paper_glue"])  # SR-STE is not in the paper's Table 4
    assert s.loc["dense", "paper_glue_all_tasks"] == 79.8 and s.loc["fst", "paper_glue_all_tasks"] == 79.6
    # the paper's values of our three tasks: SST-2, mean of the MRPC pair, RTE
    assert s.loc["dense", "paper_glue"] == pytest.approx((91.0 + (78.8 + 86.1) / 2 + 55.8) / 3)
    assert s.loc["dense", "ours_minus_dense"] == 0
    assert all(state in {"holds", "fails", "undetermined"} for _, state in mod.claims(df))


@pytest.mark.slow
def test_later_suites_reuse_the_runs_and_retrain_a_missing_checkpoint(smoke):
    """hu_table5_glue reuses hu_table4's seed-0 runs (no training); a finished run without its
    checkpoint (checkpoints are not committed) is trained again as <run-id>-ckpt, the original kept."""
    root, procs = smoke
    err = procs["hu_table5_glue"].stderr
    assert "smoke-124m-dense-s1: starting" in err and "smoke-124m-dense-s0: starting" not in err
    runs = root / "cpu" / "runs"
    (runs / "smoke-124m-fst-s1" / "checkpoint.pt").unlink()
    proc = _run("hu_table5_glue", root)
    assert "training 124m-fst-s1-ckpt for its weights" in proc.stderr
    assert (runs / "smoke-124m-fst-s1-ckpt" / "checkpoint.pt").is_file()
    assert (runs / "smoke-124m-fst-s1" / "summary.json").is_file()  # the original's logs stay
    df = read_results(root / "cpu" / "hu_table5_glue.csv")
    used = set(G.glue_rows(df)["variant"].str.split(" ").str[0])
    assert used == {"124m-dense-s0", "124m-dense-s1", "124m-fst-s0", "124m-fst-s1-ckpt"}
    # the twin committed too (logs, no weights: campaign 4c9f848's hu_table7_glue stopped on one):
    # it trains again rather than failing
    (runs / "smoke-124m-fst-s1-ckpt" / "checkpoint.pt").unlink()
    proc = _run("hu_table5_glue", root)
    assert "run 124m-fst-s1-ckpt was trained elsewhere (logs, no weights): training it again" in proc.stderr
    assert (runs / "smoke-124m-fst-s1-ckpt" / "checkpoint.pt").is_file()


# ---------------------------------------------------------------------------------------------
# the statistics, on known inputs
# ---------------------------------------------------------------------------------------------


def test_t_interval_known_values_and_bounds():
    m, lo, hi = G.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776 * np.std([1, 2, 3, 4, 5], ddof=1) / math.sqrt(5)
    assert m == 3.0 and lo == pytest.approx(3 - half) and hi == pytest.approx(3 + half)
    assert G.t_interval([40.0, 60.0], (0.0, 100.0))[1:] == (0.0, 100.0)  # 2 folds: cut to the score range
    m, lo, hi = G.t_interval([7.0])
    assert m == 7.0 and math.isnan(lo) and math.isnan(hi)


def _rows(method: str, run: str, scores: list[float]) -> list[dict]:
    return [
        {"method": method, "variant": f"{run} kfold-validation k={len(scores)} n=10", "metric": f"score_fold{f}",
         "value": v}
        for f, v in enumerate(scores)
    ]  # fmt: skip


def test_paired_gap_pairs_by_fold_and_refuses_unpaired_folds():
    df = pd.DataFrame(_rows("dense", "d-s0", [50, 60, 70, 80]) + _rows("fst", "f-s0", [51, 61, 71, 81]))
    g, lo, hi = G.paired_gap(df, "fst", "dense")
    assert (g, lo, hi) == (1.0, 1.0, 1.0)  # fold difficulty cancels: the unpaired spread would be ~13 points
    assert G.ours(df, "dense")[0] == 65.0
    other = pd.DataFrame(_rows("dense", "d-s0", [50, 60]) + _rows("fst", "f-s0", [51, 61, 71]))
    assert all(math.isnan(x) for x in G.paired_gap(other, "fst", "dense"))
    assert all(math.isnan(x) for x in G.paired_gap(df, "fst", "step"))


def test_paired_gap_pairs_runs_by_seed_not_by_position():
    """dense has seeds 0 and 2, fst 0 and 1: sorted positions would pair fst-s1 with dense-s2."""
    dense = _rows("dense", "d-s0-ckpt", [50, 60]) + _rows("dense", "d-s2", [90, 90])
    fst = _rows("fst", "f-s0", [50.5, 60.5]) + _rows("fst", "f-s1", [80, 80])
    assert all(math.isnan(x) for x in G.paired_gap(pd.DataFrame(dense + fst), "fst", "dense"))
    # the same seeds in another order of run ids: seed s1 pairs with s1, a -ckpt twin is its seed
    dense = _rows("dense", "d-s0", [50, 60]) + _rows("dense", "a-s1-ckpt", [70, 70])
    fst = _rows("fst", "z-s0", [50.5, 60.5]) + _rows("fst", "b-s1", [70.5, 70.5])
    assert G.paired_gap(pd.DataFrame(dense + fst), "fst", "dense") == (0.5, 0.5, 0.5)
    # runs without a seed suffix (Hu Table 7's sweep) pair one with one
    one = pd.DataFrame(_rows("none", "sweep-a-ckpt", [50, 60]) + _rows("decay", "sweep-b", [52, 62]))
    assert G.paired_gap(one, "decay", "none")[0] == 2.0
    assert G.seed_of("124m-fst-s1-ckpt") == "s1" and G.seed_of("sweep-fst-ckpt") == ""


def test_claim_states():
    assert G.claim_state(-0.5, 0.8, within=1.0) == "holds"
    assert G.claim_state(-3.0, -1.5, within=1.0) == "fails"
    assert G.claim_state(-2.0, 0.5, within=1.0) == "undetermined"
    assert G.claim_state(0.2, 3.0, above=0.0) == "holds"
    assert G.claim_state(-3.0, -0.2, above=0.0) == "fails"
    assert G.claim_state(-1.0, 1.0, above=0.0) == "undetermined"
    assert G.claim_state(math.nan, math.nan, above=0.0) == "not measured"


def test_missing_glue_sets_fail_before_training(tmp_path, monkeypatch):
    import repro.eval.evalsets as evalsets

    monkeypatch.setattr(evalsets, "DEFAULT_OUT", tmp_path)
    with pytest.raises(SystemExit, match=re.escape("python -m repro data evalsets")):
        G.check_evalsets("full")
    assert G.check_evalsets("smoke") == SMOKE_SETS


def test_step_and_bimask_runs_are_in_the_plan_at_the_headline_scale():
    from suites import _pretrain as P

    plan = P.plan()
    for rid, mode in (("124m-step-s0", "step"), ("124m-bimask-s0", "bimask")):
        scale, recipe = plan[rid]
        assert scale == P.HEADLINE and recipe["mode"] == mode
        cfg = P.config(rid, "full")
        assert cfg.model == "gpt2-124m" and cfg.decay == P.PAPER_LAMBDA_124M


def test_verdicts_weigh_scores_against_the_majority_class_predictor():
    base = list(G.MAJORITY_FOLD_SCORES)
    df = pd.DataFrame(_rows("dense", "d-s0", [b + 5 for b in base]) + _rows("fst", "f-s0", [b + d for b, d in
                      zip(base, (1, -1, 2, -2, 0), strict=True)]))  # fmt: skip
    text = G.majority_text(df, ["dense", "fst"])
    assert "dense +5.0 [+5.0, +5.0]" in text and "fst +0.0 [-2.0, +2.0]" in text
    assert G.with_majority("claims", df).startswith("claims. Scores over the majority-class predictor (59.5")
    two_folds = pd.DataFrame(_rows("dense", "d-s0", [60.0, 61.0]))  # smoke's k=2: folds unlike the constants'
    assert G.majority_text(two_folds, ["dense"]) == "" and G.with_majority("claims", two_folds) == "claims"


def test_majority_fold_scores_are_the_pinned_sets_own():
    from repro.eval.evalsets import DEFAULT_OUT

    if not (DEFAULT_OUT / "manifest.json").exists():
        pytest.skip(f"no {DEFAULT_OUT} (python -m repro data evalsets)")
    assert G.majority_fold_scores(DEFAULT_OUT) == G.MAJORITY_FOLD_SCORES
