"""Hu et al. 2024 Table 5, GLUE columns, at reduced scale: downstream accuracy of GPT-2 124M
pretrained dense and with the paper's 2:4 recipe (fst), two pretraining seeds each.

The paper fine-tunes its OpenWebText GPT-2 124M on GLUE's standard splits (GLUE score 73.9 dense vs
74.3 fst). Ours: the very runs of the ``table5`` loss suite (``124m-{dense,fst}-s{0,1}``, 9.8M tokens
of the offline corpus; reused, or retrained once for their weights where only their logs are
here), fine-tuned on SST-2, MRPC and RTE by stratified k-fold cross-validation on the validation
splits (``suites/_glue.py``, docs/evaluation.md). Not GLUE scores: the verdict is "not comparable";
the caveat tests the paper's claim (fst about as good as dense) on the paired fold gap, every
(seed, fold) pair counted once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from repro.paper import load_paper
from repro.plots import PALETTE, new_figure, save
from repro.suite import RunContext
from suites import _glue as G
from suites import _pretrain as P
from suites._common import Verdict

NAME = "hu_table5_glue"
PAPER = "hu2024"
ARTIFACT = "table5_glue"  # the dashboard keys suites by artifact: table5 is the loss suite's
TITLE = "Hu et al. 2024 Table 5, GLUE columns (reduced scale): SST-2/MRPC/RTE k-fold accuracy, GPT-2 124M dense vs fst"
CHECKS = G.CHECKS
PROFILES = P.PROFILES
DATA = P.DATA
SCALE = (
    "ours: GPT-2 124M pretrained for 600 steps of 16 x 1024 tokens (9.8M tokens of the offline corpus), two seeds "
    "per recipe, fine-tuned on SST-2, MRPC and RTE by 5-fold cross-validation on their validation splits; paper: "
    "GPT-2 124M on OpenWebText (nanoGPT), GLUE on its standard splits. Not GLUE scores: only dense vs fst compares."
)
RUNS = {"dense": ("124m-dense-s0", "124m-dense-s1"), "fst": ("124m-fst-s0", "124m-fst-s1")}
PAPER_METHOD: dict[str, str | None] = {"dense": "dense", "fst": "ours"}
CLOSE_TOL = 1.0
"""Points: "fst matches dense" holds when the paired interval of fst - dense lies within +-1 point
(the paper: +0.4 on its GLUE score, spreads +-0.5/1.1; +0.9 on our three tasks)."""


def run(ctx: RunContext) -> None:
    G.check_evalsets(ctx.profile)
    method = {rid: m for m, rids in RUNS.items() for rid in rids}
    for orig, (rid, d) in G.pretrained(ctx, list(method)).items():
        P.run_rows(ctx, method[orig], rid, d)
        s = G.finetune_run(ctx, method[orig], rid, d)
        ctx.log(f"{rid}: three-task k-fold score {s['score']:.1f}")


def _paper() -> pd.DataFrame:
    p = load_paper("table5", paper="hu2024")
    return p[p["shape"] == "gpt2-124m"]


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """Per recipe and task: the paper's GLUE value beside our k-fold value (both seeds' folds) with
    its interval, each minus its dense row (ours paired by seed and fold)."""
    return G.method_table_with_glue_score(df, PAPER_METHOD, _paper())


def paper_gap() -> tuple[float, float]:
    """The paper's fst - dense: (GLUE score, mean of SST-2/MRPC/RTE as we average them)."""
    t = compare(pd.DataFrame(columns=["method", "variant", "metric", "value"])).set_index(["method", "task"])
    return float(t.loc[("fst", "score"), "paper_glue_all_tasks"] - t.loc[("dense", "score"), "paper_glue_all_tasks"]), (
        float(t.loc[("fst", "score"), "paper_minus_dense"])
    )


def summary(df: pd.DataFrame) -> str:
    (text, state), *_ = claims(df)
    full, three = paper_gap()
    return (
        f"fst - dense SST-2/MRPC/RTE k-fold score: {text} ({state}); paper {three:+.1f} on the same tasks, "
        f"{full:+.1f} GLUE score (standard splits); {G.scale_note(df)}"
    )


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    t = compare(df)
    fig, (a, b) = new_figure(2, 4.4, 3.2)
    tasks = [*G.TASKS, "score"]
    x = np.arange(len(tasks))
    for i, m in enumerate(RUNS):
        s = t[t["method"] == m].set_index("task").loc[tasks]
        a.bar(x + (i - 0.5) * 0.38, s["paper_glue"], 0.38, color=PALETTE[i], label=m)
        err = np.nan_to_num([s["ours_kfold"] - s["ours_ci_low"], s["ours_ci_high"] - s["ours_kfold"]])
        b.bar(x + (i - 0.5) * 0.38, s["ours_kfold"], 0.38, color=PALETTE[i], yerr=err, capsize=2, label=m)
    a.set_title("paper: GPT-2 124M, OpenWebText, GLUE", fontsize=8)
    b.set_title(f"ours: k-fold on validation splits ({P.scale_note(df)})", fontsize=7)
    for ax in (a, b):
        ax.set_xticks(x, tasks, fontsize=7)
        ax.set_ylabel("task score (points)")
        ax.set_ylim(0, 100)
    b.legend(fontsize=7)
    return save(fig, stem)


def claims(df: pd.DataFrame) -> list[tuple[str, str]]:
    return [G.gap_text(df, "fst", "dense", "fst-dense", within=CLOSE_TOL)]


def verdict(df: pd.DataFrame) -> Verdict:
    (text, state), *_ = claims(df)
    return Verdict(
        "not comparable",
        f"paper: GPT-2 124M on OpenWebText, GLUE on standard splits; ours: {G.scale_note(df)} (not GLUE scores). "
        f"Paper's claim (fst within {CLOSE_TOL:g} pt of dense; paper {paper_gap()[0]:+.1f} GLUE score) at this scale, "
        + G.with_majority(f"paired 95% interval over seeds x folds: {text}: {state}", df),
    )
