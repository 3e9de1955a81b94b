"""N:M masks: keep the n largest |w| of every group of m consecutive entries along one dim."""

from __future__ import annotations

import torch

from kernels._common import FLOAT_DTYPES, check_divisible, check_tensor


def check_nm(n: object, m: object) -> None:
    if not isinstance(n, int) or not isinstance(m, int) or isinstance(n, bool) or isinstance(m, bool):
        raise TypeError(f"n and m must be ints, got n={n!r}, m={m!r}")
    if m <= 0 or n < 0 or n > m:
        raise ValueError(f"need 0 <= n <= m and m > 0, got n={n}, m={m}")


def nm_mask(w: torch.Tensor, n: int, m: int, dim: int = -1) -> torch.Tensor:
    """Bool mask (True = kept) with exactly n kept entries in every group of m along ``dim``.

    Ties are broken by position (torch.topk order); a plain PyTorch op: grouping plus top-k is
    memory-bound and torch's kernels already run it at a fraction of a copy.
    """
    check_tensor("w", w, dtypes=FLOAT_DTYPES, min_ndim=1)
    check_nm(n, m)
    if not -w.dim() <= dim < w.dim():
        raise ValueError(f"dim {dim} out of range for a {w.dim()}-D tensor")
    check_divisible(f"w.shape[{dim}]", w.shape[dim], m, f"group size m={m}")
    x = w.movedim(dim, -1)
    g = x.reshape(*x.shape[:-1], x.shape[-1] // m, m)
    mask = torch.zeros(g.shape, dtype=torch.bool, device=w.device)
    if n:
        idx = g.abs().topk(n, dim=-1, sorted=False).indices
        mask.scatter_(-1, idx, True)
    return mask.reshape(x.shape).movedim(-1, dim)
