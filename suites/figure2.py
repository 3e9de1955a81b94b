"""Hu et al. 2024, Figure 2: masked decay applied on the weights (SR-STE's Eq. 8: after the
optimizer step, W -= lr * lambda_W * (W * ~M)) against on the gradients (their Eq. 10: added to
dW before AdamW normalises it), at the same lambda_W, beside STE without decay: flip rate and loss.

The paper shows BERT-base and prints no numbers; its claims (on weights: no effect on STE's flip
rate; on gradients: inhibits it) are tested on our curves. Ours: a 6-layer d=384 GPT-2 on the
offline corpus, lambda_W = 6e-5 (see ``suites/_pretrain.py``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from repro.plots import PALETTE, new_figure, save
from repro.suite import RunContext
from suites import _pretrain as P
from suites._common import Verdict

NAME = "figure2"
PAPER = "hu2024"
ARTIFACT = "figure2"
TITLE = "Hu et al. 2024 Fig. 2: masked decay on weights vs on gradients (flip rate, loss)"
CHECKS = P.CHECKS
PROFILES = P.PROFILES
DATA = P.DATA
SCALE = P.SCALE
WEIGHTS, GRADS = f"sweep-decay-weights-{P.lam(6e-5)}", f"sweep-decay-grads-{P.lam(6e-5)}"
LABELS = {
    "sweep-dense": "dense (mask never applied)",
    "sweep-ste": "STE (no decay)",
    WEIGHTS: "decay on weights (Eq. 8), lambda_W = 6e-5",
    GRADS: "decay on gradients (Eq. 10), lambda_W = 6e-5",
}


def run(ctx: RunContext) -> None:
    dirs = P.ensure(ctx, P.NEEDS[NAME])
    for rid, d in dirs.items():
        P.run_rows(ctx, LABELS[rid], rid, d)
    late = {rid: P.flip_late(P.read_log(d)) for rid, d in dirs.items()}
    P.add_claim(ctx, "weights_over_ste_flip_late", late[WEIGHTS] / late["sweep-ste"], dirs)
    P.add_claim(ctx, "grads_over_ste_flip_late", late[GRADS] / late["sweep-ste"], dirs)


def compare(df: pd.DataFrame) -> pd.DataFrame:
    return P.claims_table(df, ARTIFACT)


def summary(df: pd.DataFrame) -> str:
    t = compare(df)
    return f"{(t['holds'] == 'yes').sum()} of {len(t)} of the paper's masked-decay claims hold ({P.scale_note(df)})"


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    fig, (a, b) = new_figure(2, 4.6, 3.4)
    for i, (rid, d) in enumerate(P.run_dirs_of(df).items()):
        style = dict(color=PALETTE[i % len(PALETTE)], label=LABELS.get(rid, rid), lw=1.3)
        x, y = P.curve(d, "flip_rate")
        a.plot(x / 1e6, y, **style)
        x, y = P.curve(d, "loss")
        b.plot(x / 1e6, y, **style)
    a.set_ylabel("flip rate (smoothed)")
    b.set_ylabel("training loss (smoothed)")
    for ax in (a, b):
        ax.set_xlabel("tokens (millions)")
    a.set_title(f"ours: {P.scale_note(df)}\npaper: BERT-base (qualitative, no values printed)", fontsize=8)
    a.legend(fontsize=7)
    return save(fig, stem)


def verdict(df: pd.DataFrame) -> Verdict:
    return P.claims_verdict(df, ARTIFACT, P.scale_note(df))
