"""Hu et al. 2024, Table 5 (loss column): final validation loss of GPT-2 124M, dense vs the paper's
2:4 recipe (fst), two seeds each so the seed spread sits beside the gap.

The paper: 2.907 (dense) vs 2.952 (ours) on OpenWebText with nanoGPT. Ours: the offline corpus at
reduced scale (see ``suites/_pretrain.py``): absolute losses are not comparable (other data, far
fewer tokens); the gap fst - dense is what is compared, within 0.025 nats of the paper's 0.045 (about half of it, so
that a zero gap, "sparse costs nothing", does not pass as a reproduction of a 0.045-nat cost). The
GLUE columns of Table 5 come from the downstream-accuracy suites.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from repro.paper import load_paper
from repro.plots import PALETTE, new_figure, save
from repro.suite import RunContext
from suites import _pretrain as P
from suites._common import Verdict

NAME = "table5"
PAPER = "hu2024"
ARTIFACT = "table5"
TITLE = "Hu et al. 2024 Table 5 (loss): GPT-2 124M validation loss, dense vs fst, two seeds"
CHECKS = P.CHECKS
PROFILES = P.PROFILES
DATA = P.DATA
SCALE = P.SCALE
# nats: how far our fst - dense gap may sit from the paper's and still count. Below the paper's gap
# (0.045), so a zero gap or a negative one does not read as "reproduced" (0.05 let both pass).
GAP_TOL = 0.025


def run(ctx: RunContext) -> None:
    for rid, d in P.ensure(ctx, P.NEEDS[NAME]).items():
        P.run_rows(ctx, rid.split("-")[1], rid, d)


def _paper() -> dict[str, float]:
    p = load_paper("table5", paper="hu2024")
    p = p[(p["metric"] == "val_loss") & (p["shape"] == "gpt2-124m")]
    return dict(zip(p["method"], p["value"], strict=True))


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """Per method: paper loss, our mean over seeds, the seeds' values, and the gap to dense."""
    paper = _paper()
    v = df[df["metric"] == "val_loss"]
    rows = []
    for method, paper_key in (("dense", "dense"), ("fst", "ours")):
        vals = v.loc[v["method"] == method, "value"].to_numpy(float)
        rows.append(
            {
                "method": method,
                "paper_val_loss": paper.get(paper_key, np.nan),
                "ours_mean": vals.mean() if len(vals) else np.nan,
                "ours_seeds": ", ".join(f"{x:.4f}" for x in vals),
                "ours_spread": np.ptp(vals) if len(vals) > 1 else np.nan,  # one seed: no spread measured (not 0)
            }
        )
    t = pd.DataFrame(rows)
    t["paper_gap"] = t["paper_val_loss"] - t["paper_val_loss"].iloc[0]
    t["ours_gap"] = t["ours_mean"] - t["ours_mean"].iloc[0]
    return t


def _spread(x: float) -> str:
    return "n/a (one seed)" if x != x else f"{x:.3f}"


def summary(df: pd.DataFrame) -> str:
    t = compare(df).set_index("method")
    return (
        f"fst - dense validation loss: ours {t.loc['fst', 'ours_gap']:+.3f} (seed spreads "
        f"{_spread(t.loc['dense', 'ours_spread'])} / {_spread(t.loc['fst', 'ours_spread'])}) vs paper "
        f"{t.loc['fst', 'paper_gap']:+.3f}; {P.scale_note(df)}"
    )


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    t = compare(df)
    fig, (a, b) = new_figure(2, 4.0, 3.4)
    x = np.arange(len(t))
    a.bar(x, t["ours_mean"], color=PALETTE[:2], width=0.6)
    v = df[df["metric"] == "val_loss"]
    for i, m in enumerate(t["method"]):
        seeds = v.loc[v["method"] == m, "value"].to_numpy(float)
        a.plot([i] * len(seeds), seeds, "k.", ms=6)
    a.set_xticks(x, t["method"])
    a.set_ylim(max(0.0, float(np.nanmin(t["ours_mean"])) - 0.3), float(np.nanmax(t["ours_mean"])) + 0.1)
    a.set_ylabel(f"validation loss (ours: {P.scale_note(df)})", fontsize=7)
    b.bar([0, 1], [t["paper_gap"].iloc[1], t["ours_gap"].iloc[1]], color=["white", PALETTE[1]],
          edgecolor="k", hatch=["//", ""], width=0.6)  # fmt: skip
    b.set_xticks([0, 1], ["paper (OpenWebText)", "ours"])
    b.set_ylabel("fst - dense validation loss (nats)")
    b.axhline(0, color="k", lw=0.8)
    return save(fig, stem)


def verdict(df: pd.DataFrame) -> Verdict:
    t = compare(df).set_index("method")
    ours, paper = float(t.loc["fst", "ours_gap"]), float(t.loc["fst", "paper_gap"])
    if ours != ours:
        return Verdict("not comparable", "no fst/dense runs")
    if paper != paper:  # a NaN gap compared as "exceeds" before
        return Verdict("not comparable", "the paper's fst/dense gap is missing from the paper data")
    diff = ours - paper
    status = "reproduced" if abs(diff) <= GAP_TOL else ("falls short" if diff > 0 else "exceeds")
    spreads = t["ours_spread"].dropna()
    spread = "seed spread not measured (one seed)"
    if len(spreads) == len(t):
        spread = f"seed spread up to {spreads.max():.3f}"
    return Verdict(
        status,
        f"gap fst - dense {ours:+.3f} vs paper {paper:+.3f} (tolerance {GAP_TOL}), {spread}; "
        f"absolute losses not comparable ({P.scale_note(df)} vs OpenWebText); judged on the 124M row's loss "
        "column only (its GLUE columns: hu_table5_glue; the 350M-1.5B rows are not run)",
    )
