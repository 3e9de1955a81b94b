"""Hu et al. 2024, Figure 1: flip rate over training (the fraction of 2:4 mask entries that change
in one optimizer step, Definition 4.1) of dense training (the mask of its dense weights, computed
and never applied), STE, and STE with masked decay at several lambda_W, same schedule.

The paper shows Transformer-base on WMT14 and prints no numbers: its claims (dense rises then
declines; STE's flip rate explodes above dense; larger lambda_W, smaller flip rate) are tested on
our curves (``repro/paper_data/claims_hu2024.csv``). Ours: a 6-layer d=384 GPT-2 on the offline
corpus (see ``suites/_pretrain.py`` for the scale); the decay is on the gradients (Eq. 10).
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pandas as pd

from repro.plots import PALETTE, new_figure, save
from repro.suite import RunContext
from suites import _pretrain as P
from suites._common import Verdict

NAME = "figure1"
PAPER = "hu2024"
ARTIFACT = "figure1"
TITLE = "Hu et al. 2024 Fig. 1: flip rate of dense, STE and masked decay at several lambda_W"
CHECKS = P.CHECKS
PROFILES = P.PROFILES
DATA = P.DATA
SCALE = P.SCALE
LABELS = {"sweep-dense": "dense (mask never applied)", "sweep-ste": "STE (lambda_W = 0)"}
LABELS.update({f"sweep-decay-grads-{P.lam(x)}": f"masked decay, lambda_W = {x:g}" for x in P.SWEEP_LAMBDAS})


def run(ctx: RunContext) -> None:
    dirs = P.ensure(ctx, P.NEEDS[NAME])
    for rid, d in dirs.items():
        P.run_rows(ctx, LABELS[rid], rid, d)
    logs = {rid: P.read_log(d) for rid, d in dirs.items()}
    dense = P.smooth(logs["sweep-dense"]["flip_rate"].to_numpy(float))
    tail = max(1, len(dense) // 20)
    P.add_claim(ctx, "dense_flip_peak_over_final", dense.max() / max(dense[-tail:].mean(), 1e-12), dirs)
    late = {rid: P.flip_late(log) for rid, log in logs.items()}
    P.add_claim(ctx, "ste_over_dense_flip_late", late["sweep-ste"] / late["sweep-dense"], dirs)
    order = ["sweep-ste", *(f"sweep-decay-grads-{P.lam(x)}" for x in sorted(P.SWEEP_LAMBDAS))]
    means = [float(logs[r]["flip_rate"].mean()) for r in order]
    P.add_claim(ctx, "srste_flip_decreasing_in_lambda", float(all(a > b for a, b in pairwise(means))), dirs)


def compare(df: pd.DataFrame) -> pd.DataFrame:
    return P.claims_table(df, ARTIFACT)


def summary(df: pd.DataFrame) -> str:
    t = compare(df)
    return f"{(t['holds'] == 'yes').sum()} of {len(t)} of the paper's flip-rate claims hold ({P.scale_note(df)})"


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    fig, (ax,) = new_figure(1, 6.4, 3.6)
    for i, (rid, d) in enumerate(P.run_dirs_of(df).items()):
        x, y = P.curve(d, "flip_rate")
        ax.plot(x / 1e6, y, color=PALETTE[i % len(PALETTE)], label=LABELS.get(rid, rid), lw=1.3)
    ax.set_xlabel("tokens (millions)")
    ax.set_ylabel("flip rate (smoothed)")
    ax.set_title(f"Flip rate, ours: {P.scale_note(df)}\npaper: Transformer-base (qualitative, no values printed)")
    ax.legend(fontsize=7)
    return save(fig, stem)


def verdict(df: pd.DataFrame) -> Verdict:
    return P.claims_verdict(df, ARTIFACT, P.scale_note(df))
