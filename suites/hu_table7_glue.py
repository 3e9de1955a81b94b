"""Hu et al. 2024 Table 7, GLUE column, at reduced scale: downstream accuracy of the ablation of
masked decay, MVUE and dense fine-tuning (the paper's five rows).

The paper: 16-layer BERT-base (Cramming, C4), GLUE score per row (77.6 none; 79.2 decay; 78.4
decay + MVUE; 79.4 decay + FT; 79.6 all three). Ours: the very runs of the ``table7`` loss suite (a
6-layer d=384 GPT-2, 4.9M tokens of the offline corpus; reused, or retrained once for their weights
where only their logs are here), fine-tuned on SST-2, MRPC and RTE by stratified k-fold
cross-validation on the validation splits (``suites/_glue.py``, docs/evaluation.md). Not GLUE
scores: the verdict is "not comparable"; the caveat gives each technique's effect on our score
(paired by fold) beside the paper's effect on its GLUE score.
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

NAME = "hu_table7_glue"
PAPER = "hu2024"
ARTIFACT = "table7_glue"  # the dashboard keys suites by artifact: table7 is the loss suite's
TITLE = "Hu et al. 2024 Table 7, GLUE column (reduced scale): SST-2/MRPC/RTE k-fold accuracy of the fst ablation"
CHECKS = G.CHECKS
PROFILES = P.PROFILES
DATA = P.DATA
SCALE = (
    "ours: 6-layer d=384 GPT-2 pretrained for 300 steps of 16 x 1024 tokens (4.9M tokens of the offline corpus) per "
    "ablation row, fine-tuned on SST-2, MRPC and RTE by 5-fold cross-validation on their validation splits; paper: "
    "16-layer BERT-base (Cramming) on C4, GLUE's 8 tasks on standard splits. Not GLUE scores: only the effects of "
    "the techniques (differences between rows) compare."
)
ROWS = {rid: name for rid, (name, _) in P.TABLE7_ROWS.items()}  # run id -> row (none, decay, ...)
EFFECTS = {"decay": ("none", "decay"), "mvue": ("decay", "decay+mvue"), "dense_ft": ("decay", "decay+ft")}
"""Each technique's effect: (row without it, row with it), as the paper's rows pair up (``table7``)."""


def run(ctx: RunContext) -> None:
    G.check_evalsets(ctx.profile)
    for orig, (rid, d) in G.pretrained(ctx, list(ROWS)).items():
        P.run_rows(ctx, ROWS[orig], rid, d)
        s = G.finetune_run(ctx, ROWS[orig], rid, d)
        ctx.log(f"{rid}: three-task k-fold score {s['score']:.1f}")


def _paper() -> pd.Series:
    p = load_paper("table7", paper="hu2024")
    s = p[p["metric"] == "glue_score"].set_index("method")["value"]
    s.index = s.index.str.replace("_", "+")
    return s


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """Per ablation row: the paper's GLUE score (8 tasks) beside our three-task k-fold score with its
    fold interval (not a GLUE score)."""
    paper = _paper()
    rows = []
    for _, (name, (decay, mvue, ft)) in P.TABLE7_ROWS.items():
        m, lo, hi = G.ours(df, name)
        rows.append({"row": name, "decay": decay, "mvue": mvue, "dense_ft": ft, "paper_glue": paper.get(name, np.nan),
                     "ours_kfold": m, "ours_ci_low": lo, "ours_ci_high": hi})  # fmt: skip
    return pd.DataFrame(rows)


def effects(df: pd.DataFrame) -> pd.DataFrame:
    """Score change each technique brings: the paper's (GLUE) and ours (three-task k-fold, paired by
    fold, with its 95% interval)."""
    paper = _paper()
    out = []
    for k, (a, b) in EFFECTS.items():
        g, lo, hi = G.paired_gap(df, b, a)
        out.append({"technique": k, "paper_delta": paper.get(b, np.nan) - paper.get(a, np.nan),
                    "ours_delta": g, "ours_ci_low": lo, "ours_ci_high": hi})  # fmt: skip
    return pd.DataFrame(out)


def summary(df: pd.DataFrame) -> str:
    e = effects(df)
    parts = ", ".join(
        f"{r.technique} {r.ours_delta:+.1f} [{r.ours_ci_low:+.1f}, {r.ours_ci_high:+.1f}] (paper {r.paper_delta:+.1f})"
        for r in e.itertuples()
    )
    return f"score change per technique, ours k-fold vs paper GLUE: {parts}; {G.scale_note(df)}"


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    e = effects(df)
    fig, (ax,) = new_figure(1, 5.0, 3.4)
    x = np.arange(len(e))
    ax.bar(x - 0.2, e["paper_delta"], 0.4, color="white", edgecolor="k", hatch="//", label="paper (BERT-base, GLUE)")
    err = np.nan_to_num([e["ours_delta"] - e["ours_ci_low"], e["ours_ci_high"] - e["ours_delta"]])
    ax.bar(
        x + 0.2, e["ours_delta"], 0.4, color=PALETTE[0], yerr=err, capsize=3, label=f"ours (k-fold; {P.scale_note(df)})"
    )
    ax.set_xticks(x, e["technique"])
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel("score change when the technique is added (points)")
    ax.legend(fontsize=7)
    return save(fig, stem)


def direction(low: float, high: float) -> str:
    """What a paired interval says of an effect: "gain", "loss", "within noise" or "not measured"."""
    state = G.claim_state(low, high, above=0.0)
    return {"holds": "gain", "fails": "loss", "undetermined": "within noise"}.get(state, state)


def verdict(df: pd.DataFrame) -> Verdict:
    e = effects(df)
    said = "; ".join(
        f"{r.technique} {r.ours_delta:+.1f} [{r.ours_ci_low:+.1f}, {r.ours_ci_high:+.1f}] vs paper {r.paper_delta:+.1f}"
        f" ({direction(r.ours_ci_low, r.ours_ci_high)})"
        for r in e.itertuples()
    )
    return Verdict(
        "not comparable",
        f"paper: BERT-base/C4, 8 GLUE tasks on standard splits; ours: {G.scale_note(df)} (not GLUE scores). "
        + G.with_majority(f"Effect of each technique on our score, paired 95% fold intervals: {said}", df),
    )
