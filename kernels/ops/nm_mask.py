"""N:M masks: keep the n largest |w| of every group of m consecutive entries along one dim."""

from __future__ import annotations

import torch

from kernels.ops.common import FLOAT_DTYPES, check_divisible, check_tensor, use_triton


def check_nm(n: object, m: object) -> None:
    if not isinstance(n, int) or not isinstance(m, int) or isinstance(n, bool) or isinstance(m, bool):
        raise TypeError(f"n and m must be ints, got n={n!r}, m={m!r}")
    if m <= 0 or n < 0 or n > m:
        raise ValueError(f"need 0 <= n <= m and m > 0, got n={n}, m={m}")


def nm_mask_reference(w: torch.Tensor, n: int, m: int, dim: int = -1) -> torch.Tensor:
    """``nm_mask`` in plain PyTorch: a stable descending sort of |w| in every group (ties to the
    lower index), the first n kept."""
    _check(w, n, m, dim)
    return stable_nm(w, n, m, dim)


def stable_nm(w: torch.Tensor, n: int, m: int, dim: int) -> torch.Tensor:
    """The reference's computation without its checks (callers have validated)."""
    x = w.movedim(dim, -1)
    g = x.reshape(*x.shape[:-1], x.shape[-1] // m, m)
    mask = torch.zeros(g.shape, dtype=torch.bool, device=w.device)
    if n:
        idx = g.abs().sort(dim=-1, descending=True, stable=True).indices[..., :n]
        mask.scatter_(-1, idx, True)
    return mask.reshape(x.shape).movedim(-1, dim)


def _check(w: object, n: object, m: object, dim: object, finite: bool = True) -> None:
    check_tensor("w", w, dtypes=FLOAT_DTYPES, min_ndim=1, finite=finite)
    check_nm(n, m)
    if isinstance(dim, bool) or not isinstance(dim, int):  # True is an int: it passed, then movedim failed
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -w.dim() <= dim < w.dim():
        raise ValueError(f"dim {dim} out of range for a {w.dim()}-D tensor")
    check_divisible(f"w.shape[{dim}]", w.shape[dim], m, f"group size m={m}")


def nm_mask(w: torch.Tensor, n: int, m: int, dim: int = -1, *, check_finite: bool = True) -> torch.Tensor:
    """Bool mask (True = kept) with exactly n kept entries in every group of m along ``dim``.

    Ties go to the lower index. On CUDA (or under the interpreter) and for m a power of two, one
    Triton pass (the fused group kernel of ``kernels.ops._flex_triton`` with a fixed n: the rank of an
    entry is counted against its group in registers); elsewhere :func:`nm_mask_reference`. The
    NaN/Inf scan of the input (one read and a host sync) is skipped with ``check_finite=False``
    (then a call can be captured in a CUDA graph). Unchecked, a group holding a NaN keeps n + 1
    entries on the Triton path (every comparison with NaN is false, so it and the n largest others
    all rank below n; the reference keeps n, NaN as the largest): a NaN weight already makes the
    layer's output NaN, and its mask is then not n:m. ±Inf is ranked correctly."""
    _check(w, n, m, dim, check_finite)
    if n in (0, m) or w.numel() == 0:  # an empty w gets an empty mask of its shape
        return torch.full(w.shape, n == m, device=w.device)
    if not use_triton(w) or m & (m - 1):
        return stable_nm(w, n, m, dim)
    from kernels.ops._flex_triton import fast_mask_triton
    from kernels.ops.patterns import NM

    x = w.movedim(dim, -1)
    x2 = x.reshape(-1, x.shape[-1])
    mask = fast_mask_triton(x2, NM(n, m), 0.0, 0)  # fixed n: no pivot, no draw
    return mask.reshape(x.shape).movedim(-1, dim)


def nm24_mask(w: torch.Tensor) -> torch.Tensor:
    """2:4 mask of a 2-D weight along its input dim (dim 1), ties to the lower index, unchecked for
    NaN/Inf: no host sync, so SR-STE's per-forward mask and the flip tracker can run inside a CUDA
    graph. The one 2:4 helper of the package (``SparseLinear``, its compiled op, ``FlipTracker``)."""
    return nm_mask(w.detach(), 2, 4, dim=1, check_finite=False)
