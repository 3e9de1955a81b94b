"""Hu et al. 2024, Figure 3 (named ``hu_figure3``: ``figure3`` is FAST's): dense fine-tuning (the
last 1/6 of the steps dense, their recipe) against dense pre-training (the first 1/6 dense,
STEP-style) and no dense phase, all with the fst recipe otherwise: loss curves.

The paper shows BERT-base and prints no numbers; its claims (fine-tuning ends lower than
pre-training; pre-training ends about where no dense phase does) are tested on our final
validation losses. Ours: a 6-layer d=384 GPT-2 on the offline corpus (see ``suites/_pretrain.py``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from repro.plots import PALETTE, new_figure, save
from repro.suite import RunContext
from suites import _pretrain as P
from suites._common import Verdict

NAME = "hu_figure3"
PAPER = "hu2024"
ARTIFACT = "figure3"
TITLE = "Hu et al. 2024 Fig. 3: dense fine-tuning vs dense pre-training vs none (loss)"
CHECKS = P.CHECKS
PROFILES = P.PROFILES
DATA = P.DATA
SCALE = P.SCALE
LABELS = {
    "sweep-fst": "dense fine-tuning (last 1/6)",
    "sweep-fst-pretrain": "dense pre-training (first 1/6)",
    "sweep-fst-noft": "no dense phase",
}


def run(ctx: RunContext) -> None:
    dirs = P.ensure(ctx, P.NEEDS[NAME])
    for rid, d in dirs.items():
        P.run_rows(ctx, LABELS[rid], rid, d)
    val = {rid: float(P.read_val(d)["val_loss"].iloc[-1]) for rid, d in dirs.items()}
    ft, pre, none = val["sweep-fst"], val["sweep-fst-pretrain"], val["sweep-fst-noft"]
    P.add_claim(ctx, "ft_minus_pretrain_val_loss", ft - pre, dirs)
    P.add_claim(ctx, "pretrain_gap_over_ft_gain", abs(pre - none) / max(abs(ft - none), 1e-12), dirs)


def compare(df: pd.DataFrame) -> pd.DataFrame:
    return P.claims_table(df, "hu_figure3")


def summary(df: pd.DataFrame) -> str:
    t = compare(df)
    return f"{(t['holds'] == 'yes').sum()} of {len(t)} of the paper's dense-phase claims hold ({P.scale_note(df)})"


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    fig, (a, b) = new_figure(2, 4.6, 3.4)
    for i, (rid, d) in enumerate(P.run_dirs_of(df).items()):
        style = dict(color=PALETTE[i % len(PALETTE)], label=LABELS.get(rid, rid), lw=1.3)
        x, y = P.curve(d, "loss")
        a.plot(x / 1e6, y, **style)
        x, y = P.curve(d, "val_loss")
        b.plot(x / 1e6, y, marker="o", ms=3, **style)
    a.set_ylabel("training loss (smoothed)")
    b.set_ylabel("validation loss")
    for ax in (a, b):
        ax.set_xlabel("tokens (millions)")
    a.set_title(f"ours: {P.scale_note(df)}\npaper: BERT-base (qualitative, no values printed)", fontsize=8)
    b.legend(fontsize=7)
    return save(fig, stem)


def verdict(df: pd.DataFrame) -> Verdict:
    return P.claims_verdict(df, "hu_figure3", P.scale_note(df))
