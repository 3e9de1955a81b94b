"""Helpers shared by suites: dtype names, paper-vs-ours pivots."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def dtype_name(dt: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dt]


def pivot_metric(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Rows (shape, dtype) x columns method of one metric's values."""
    part = df[df["metric"] == metric]
    if part.empty:
        return pd.DataFrame()
    return part.pivot_table(index=["shape", "dtype"], columns="method", values="value", aggfunc="first")


def shape_order(shapes: list[str]) -> list[str]:
    """Sort shape labels by element count, then text."""

    def key(s: str) -> tuple[int, str]:
        n = 1
        for p in s.split("x"):
            n *= int(p)
        return n, s

    return sorted(set(shapes), key=key)


def cell(table: pd.DataFrame, key: object, column: str) -> float:
    """``table.loc[key, column]`` or NaN when the row or column is absent."""
    if table.empty or key not in table.index or column not in table.columns:
        return float("nan")
    return float(table.loc[key, column])


VERDICTS = ("reproduced", "exceeds", "falls short", "not comparable")
"""Statuses of an artifact with GPU results: ours matches the paper within the stated tolerance,
is above it, is below it, or measures something the paper's number cannot be compared with."""


@dataclass(frozen=True)
class Verdict:
    """How our result stands against the paper's, with one line of caveat (why, and what differs)."""

    status: str
    caveat: str

    def __post_init__(self) -> None:
        if self.status not in VERDICTS:
            raise ValueError(f"status must be one of {VERDICTS}, got {self.status!r}")


def ratio_verdict(ours: float, paper: float, tol: float, caveat: str) -> Verdict:
    """``reproduced`` when ours is within ``tol`` (relative) of the paper's value, else
    ``exceeds`` or ``falls short``; ``not comparable`` when either side is missing."""
    if not (ours == ours and paper == paper) or paper == 0:
        return Verdict("not comparable", caveat + " (no value to compare)")
    rel = ours / paper - 1
    status = "reproduced" if abs(rel) <= tol else ("exceeds" if rel > 0 else "falls short")
    said = f"ours {ours:.3g} vs paper {paper:.3g} ({rel:+.0%}, tolerance {tol:.0%})"
    return Verdict(status, f"{said}; {caveat}" if caveat else said)


def baseline_bound_verdict(ours: float, paper: float, tol: float, caveat: str, baseline: str) -> Verdict:
    """:func:`ratio_verdict`, except that a ratio more than twice the paper's is "not comparable": a gap
    that size measures how much weaker our baseline is than the paper's (``baseline`` says how fast
    ours runs), not the method, so "exceeds" would over-claim."""
    v = ratio_verdict(ours, paper, tol, caveat)
    if v.status == "exceeds" and ours > 2 * paper:
        return Verdict(
            "not comparable",
            f"ours {ours:.3g}x vs paper {paper:.3g}x, more than twice the paper's ratio: it measures our baseline "
            f"({baseline}) more than the method; {caveat}",
        )
    return v


def gpu_of(df: pd.DataFrame) -> str:
    """The GPU the rows ran on (their ``gpu_name``), for caveats that name it."""
    names = sorted({str(g) for g in df.get("gpu_name", pd.Series(dtype=str)).dropna() if str(g)})
    return "/".join(names) or "this GPU"


def worst(verdicts: list[Verdict]) -> str:
    """The status that decides for several comparisons: falls short, then not comparable, then
    exceeds, then reproduced (an artifact is reproduced only where every part is)."""
    order = ("falls short", "not comparable", "exceeds", "reproduced")
    return min((v.status for v in verdicts), key=order.index)


def precision_caveat(df: pd.DataFrame) -> str:
    """What the paper ran (fp16 mixed precision) beside what these rows ran (their dtype label)."""
    ran = sorted({str(d).split("-")[0] for d in df["dtype"].dropna() if str(d).startswith(("bf16", "fp16"))})
    return f"{'/'.join(ran) or 'unknown'} vs the paper's fp16"
