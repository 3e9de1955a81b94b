"""The one relative-error measure every check uses (suites, benchmarks, tests): float64, and a
NaN or Inf on either side gives +inf, so a non-finite output can never pass a tolerance."""

from __future__ import annotations

import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (||out - ref|| where ref is all zeros); +inf where
    either side holds NaN/Inf; AssertionError on a shape mismatch (never broadcast)."""
    o, r = out.detach().double(), ref.detach().double()
    if o.shape != r.shape:
        raise AssertionError(f"shape mismatch {tuple(o.shape)} vs {tuple(r.shape)}")
    if not bool(torch.isfinite(o).all()) or not bool(torch.isfinite(r).all()):
        return float("inf")
    num, denom = (o - r).norm().item(), r.norm().item()
    return num / denom if denom else num
