"""Shared test helpers: relative error that never lets NaN pass, poisoned outputs."""

from __future__ import annotations

import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN/Inf anywhere gives +inf so it can never pass."""
    o = out.detach().double().cpu()
    r = ref.detach().double().cpu()
    if o.shape != r.shape:
        raise AssertionError(f"shape mismatch {tuple(o.shape)} vs {tuple(r.shape)}")
    if not torch.isfinite(o).all() or not torch.isfinite(r).all():
        return float("inf")
    denom = r.norm().item()
    num = (o - r).norm().item()
    if denom == 0.0:
        return num
    return num / denom


def assert_close_rel(out: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    e = rel_err(out, ref)
    assert e <= tol, f"relative error {e:.3e} > {tol:.1e}"
