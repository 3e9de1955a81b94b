"""Helpers shared by suites: dtype names, paper-vs-ours pivots."""

from __future__ import annotations

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
