"""Hu et al. 2024, Figure 10 (left): training loss of GPT-2 with dense training and 2:4 recipes.

Ours: GPT-2 124M on the offline corpus (see ``suites/_pretrain.py`` for the scale), dense, fst (the
paper's recipe), srste (sparse forward, dense backward, masked decay), weight24 (two of three GEMMs
2:4) and half (the FFN width halved), one seed. The paper prints no values; its claim (fst's loss
ends close to dense training's) is tested on the final validation losses.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from repro.plots import PALETTE, new_figure, save
from repro.suite import RunContext
from suites import _pretrain as P
from suites._common import Verdict

NAME = "figure10"
PAPER = "hu2024"
ARTIFACT = "figure10"
TITLE = "Hu et al. 2024 Fig. 10: training loss of GPT-2 124M, dense vs 2:4 recipes"
CHECKS = P.CHECKS
PROFILES = P.PROFILES
DATA = P.DATA
SCALE = P.SCALE


def _method(rid: str) -> str:
    return rid.removeprefix("124m-").removesuffix("-s0")


def run(ctx: RunContext) -> None:
    dirs = P.ensure(ctx, P.NEEDS[NAME])
    for rid, d in dirs.items():
        P.run_rows(ctx, _method(rid), rid, d)
    val = {rid: float(P.read_val(d)["val_loss"].iloc[-1]) for rid, d in dirs.items()}
    P.add_claim(ctx, "fst_minus_dense_val_loss", val["124m-fst-s0"] - val["124m-dense-s0"], dirs)


def compare(df: pd.DataFrame) -> pd.DataFrame:
    return P.claims_table(df, ARTIFACT)


def summary(df: pd.DataFrame) -> str:
    v = df[df["metric"] == "val_loss"].set_index("method")["value"]
    parts = ", ".join(f"{m} {x:.3f}" for m, x in v.items())
    return f"final validation loss ({P.scale_note(df)}): {parts}"


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    fig, (a, b) = new_figure(2, 4.6, 3.4)
    for i, (rid, d) in enumerate(P.run_dirs_of(df).items()):
        style = dict(color=PALETTE[i % len(PALETTE)], label=_method(rid), lw=1.3)
        x, y = P.curve(d, "loss", frac=0.02)
        a.plot(x / 1e6, y, **style)
        x, y = P.curve(d, "val_loss")
        b.plot(x / 1e6, y, marker="o", ms=3, **style)
    a.set_ylabel("training loss (smoothed)")
    b.set_ylabel("validation loss")
    for ax in (a, b):
        ax.set_xlabel("tokens (millions)")
    a.set_title(f"ours: {P.scale_note(df)}\npaper: GPT-2 on OpenWebText (curves only)", fontsize=8)
    b.legend(fontsize=7)
    return save(fig, stem)


def verdict(df: pd.DataFrame) -> Verdict:
    return P.claims_verdict(df, ARTIFACT, P.scale_note(df))
