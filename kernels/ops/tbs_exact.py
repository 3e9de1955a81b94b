"""Exact within-tile selection for TBS(x) at any x, for measuring the heuristics' gaps.

Keeping n per row and per column of an x-by-x tile with the largest retained |w| is a maximum
weight n-regular bipartite subgraph (a transportation problem); its LP relaxation is integral
(the constraint matrix is totally unimodular), so ``scipy.optimize.linprog`` returns the exact
0/1 optimum. Slow (one LP per tile): for samples, not for training.
"""

from __future__ import annotations

import numpy as np
import torch


def tbs_select_exact(mags: torch.Tensor, n: int) -> torch.Tensor:
    """Optimal bool [x, x] layout with n kept per row and per column of one tile of magnitudes."""
    from scipy.optimize import linprog

    x = mags.shape[0]
    if mags.shape != (x, x) or not 0 <= n <= x:
        raise ValueError(f"need a square tile and 0 <= n <= x, got shape {tuple(mags.shape)}, n={n}")
    if n in (0, x):
        return torch.full((x, x), bool(n), dtype=torch.bool)
    c = -mags.double().flatten().numpy()
    rows = np.kron(np.eye(x), np.ones((1, x)))  # sum over columns of row i
    cols = np.kron(np.ones((1, x)), np.eye(x))  # sum over rows of column j
    res = linprog(c, A_eq=np.vstack([rows, cols]), b_eq=np.full(2 * x, n), bounds=(0, 1), method="highs")
    if res.status != 0:
        raise RuntimeError(f"linprog failed: {res.message}")
    return torch.from_numpy(np.rint(res.x).reshape(x, x) > 0.5)


SELECTIONS = ("swaps", "circulant")


def heuristic_gap(pattern_x: int, tiles: torch.Tensor, n: torch.Tensor, selection: str = "swaps") -> float:
    """Mean relative retained-|w| gap (1 - heuristic / exact) of a TBS(x) selection on sample tiles.

    ``selection``: "swaps", the selection in use (``TBS.select``: the permutation starts with
    row-pair swap sweeps, ``kernels.ops.patterns.tbs_select_swaps``; exact for x <= 4), or
    "circulant", the former heuristic (the n best wrapped diagonals), kept so that a suite can
    report how much the swaps recover."""
    from kernels.ops.patterns import TBS

    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    pattern = TBS(pattern_x)
    heur = pattern.select(tiles, n) if selection == "swaps" else pattern.select_circulant(tiles, n)
    gaps = []
    for t in range(tiles.shape[0]):
        ex = tbs_select_exact(tiles[t], int(n[t]))
        best = float((tiles[t].double() * ex).sum())
        got = float((tiles[t].double() * heur[t]).sum())
        gaps.append(1.0 - got / best if best > 0 else 0.0)
    return float(np.mean(gaps))
