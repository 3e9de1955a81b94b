"""Flex-SS mask generation (FAST Sec. II): three methods behind one call.

Every method starts from the global pivot (the magnitude of the k-th largest weight, k =
round(density * numel)). A tile "wants" ``c_t`` entries (its count of |w| >= pivot), i.e. a
configuration ``n_t = c_t / unit`` that is rarely in the pattern's configuration set. Let
``lo_t <= n_t <= hi_t`` be the two configurations that bracket it and ``p_t`` its position between
them. The methods differ in how a tile decides between ``lo_t`` and ``hi_t``:

- ``torch`` (the PyTorch implementation): every tile starts at ``lo_t``; the remaining budget
  ``K - sum kept(lo_t)`` is handed to the tiles with the largest ``p_t`` (largest-remainder
  allocation). This meets the budget to within one tile step, but the decision of each tile
  depends on all others through one global sort: the dependency between tiles FAST removes.
- ``vegeta`` (the Vegeta-based method): every tile rounds to the nearer configuration
  (deterministic), then a correction moves just enough tiles (those closest to the other
  choice, found with a top-k of the needed size) to meet the budget.
- ``fast`` (FAST): tile t takes ``hi_t`` with probability ``p_t`` from a counter-based uniform
  ``u_t = Philox(seed, t)``, so the *expected* kept count is exactly ``sum c_t = K`` with no
  dependency between tiles; by the law of large numbers the relative error shrinks like
  1/sqrt(#tiles). On CUDA (or under TRITON_INTERPRET=1) compare-with-pivot, count, draw, choose
  and within-tile selection are one Triton pass over the weight (``kernels/_flex_triton.py``).

Within-tile selection is the pattern's (``Pattern.select``): exact for TBS(4) and n:m/Vegeta,
the wrapped-diagonal heuristic for TBS(x >= 8). All three methods use the same selection, so
they differ only in the per-tile configuration (and in speed).
"""

from __future__ import annotations

import math

import torch

from kernels._common import FLOAT_DTYPES, check_tensor, use_triton
from kernels.patterns import NM, TBS, Pattern, Unstructured, Vegeta

METHODS = ("torch", "vegeta", "fast")


def check_density(density: object) -> float:
    if isinstance(density, bool) or not isinstance(density, (int, float)):
        raise TypeError(f"density must be a real number in [0, 1], got {density!r}")
    d = float(density)
    if not (0.0 <= d <= 1.0) or math.isnan(d):
        raise ValueError(f"density must lie in [0, 1] (fraction of weights kept), got {density!r}")
    return d


def bracket(configs: tuple[int, ...], n_real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(lo, hi, p): the configurations bracketing each tile's wanted configuration and the
    probability of ``hi`` that makes the expected kept count exact (clamped to the set's ends)."""
    c = torch.tensor(configs, dtype=torch.float32, device=n_real.device)
    x = n_real.float().clamp(c[0], c[-1])
    i_hi = torch.searchsorted(c, x, right=False).clamp(max=len(configs) - 1)
    i_lo = (torch.searchsorted(c, x, right=True) - 1).clamp(min=0)
    lo, hi = c[i_lo], c[i_hi]
    span = hi - lo
    p = torch.where(span > 0, (x - lo) / span.clamp(min=1e-30), torch.zeros_like(x))
    return lo.long(), hi.long(), p


def tile_counts(w: torch.Tensor, pattern: Pattern, pivot: float, tie: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles of |w| as float32 [T, th, tw] and each tile's wanted count [T] (float32):
    #(|w| > pivot) + tie * #(|w| == pivot), the expression the Triton kernels evaluate."""
    mags = pattern.tiles(w.abs().float())
    flat = mags.flatten(1)
    gt = (flat > pivot).sum(1).float()
    eq = (flat == pivot).sum(1).float()
    return mags, gt + eq * torch.tensor(tie, dtype=torch.float32, device=w.device)


def tie_share(tensors: torch.Tensor | list[torch.Tensor], pivot: float, density: float) -> float:
    """Fraction of the entries equal to the pivot that the budget k = round(density * n) needs.

    With low-precision weights many entries share the pivot's value (bf16 randn at 50%: about
    0.25% of all entries); counting them all would overshoot the budget by that much. Tiles
    count ties with this weight, so the expected total is exactly k."""
    ts = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    n = sum(t.numel() for t in ts)
    gt = sum(int((t.abs().float() > pivot).sum()) for t in ts)
    eq = sum(int((t.abs().float() == pivot).sum()) for t in ts)
    if eq == 0:
        return 1.0
    return min(1.0, max(0.0, (round(density * n) - gt) / eq))


def choose_configs(method: str, pattern: Pattern, counts: torch.Tensor, budget: int, seed: int = 0) -> torch.Tensor:
    """Configuration of every tile [T] (int64) by one of the three methods."""
    counts = counts.float()
    lo, hi, p = bracket(pattern.configs, counts / pattern.unit)
    if method == "fast":
        # u < p, written without a division (u * span < count - kept(lo)) so that the Triton
        # kernels evaluate the very same float32 expression and draw the same configuration
        u = uniforms(seed, counts.shape[0], counts.device)
        take_hi = u * ((hi - lo) * pattern.unit).float() < counts - (lo * pattern.unit).float()
        return torch.where(take_hi, hi, lo)
    cost = (hi - lo) * pattern.unit  # entries gained by moving a tile from lo to hi
    if method == "torch":
        remaining = budget - int((lo * pattern.unit).sum())
        order = torch.argsort(p, descending=True, stable=True)  # the global dependency
        take = (torch.cumsum(cost[order], 0) <= remaining) & (p[order] > 0)
        up = torch.zeros_like(take)
        up[order] = take
        return torch.where(up, hi, lo)
    if method == "vegeta":
        n = torch.where(p >= 0.5, hi, lo)
        deficit = budget - int((n * pattern.unit).sum())
        if deficit > 0:  # move the lo-tiles nearest to hi up
            cand = (n == lo) & (cost > 0)
            key = torch.where(cand, p, torch.full_like(p, -1.0))
            sign = 1
        elif deficit < 0:  # move the hi-tiles nearest to lo down
            cand = (n == hi) & (cost > 0)
            key = torch.where(cand, 1.0 - p, torch.full_like(p, -1.0))
            sign = -1
        else:
            return n
        step = max(1, int(cost[cand].min())) if bool(cand.any()) else 1
        k = min(int(cand.sum()), -(-abs(deficit) // step))
        idx = torch.topk(key, k, sorted=True).indices
        fits = torch.cumsum(cost[idx], 0) <= abs(deficit)
        idx = idx[fits]
        n[idx] = hi[idx] if sign > 0 else lo[idx]
        return n
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")


def uniforms(seed: int, n: int, device: torch.device) -> torch.Tensor:
    """Per-tile uniforms u_t = Philox(seed, t): the Triton kernel's draws where Triton runs,
    else torch.rand seeded with ``seed`` (reproducible per path; the two paths differ)."""
    probe = torch.empty(0, device=device)
    if use_triton(probe):
        from kernels.mvue import mvue24_uniforms

        return mvue24_uniforms(seed, n, device)
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.rand(n, generator=g, device=device)


def _check(w: torch.Tensor, pattern: object, density: object, method: str, check_finite: bool) -> float:
    check_tensor("w", w, dtypes=FLOAT_DTYPES, ndim=2, finite=check_finite)
    if not isinstance(pattern, Pattern):
        raise TypeError(f"pattern must be a kernels.patterns.Pattern (TBS, Vegeta, NM, Unstructured), got {pattern!r}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    d = check_density(density)
    pattern.check_shape(tuple(w.shape))
    if len(pattern.configs) == 1 and abs(d - pattern.density(pattern.configs[0])) > 1e-12:
        raise ValueError(f"{pattern.name} fixes the density at {pattern.density(pattern.configs[0])}, got {d}")
    return d


def flex_mask(
    w: torch.Tensor,
    pattern: Pattern,
    density: float,
    method: str = "fast",
    seed: int = 0,
    pivot: float | None = None,
    *,
    tie: float | None = None,
    check_finite: bool = True,
) -> torch.Tensor:
    """Bool mask (True = kept) of a 2-D weight under ``pattern`` at ``density`` (fraction kept).

    ``pivot``: the global magnitude threshold, e.g. from ``kernels.find_pivot`` over all weights
    of a model (or a tensor-parallel group); computed from ``w`` alone when None.
    ``tie``: the weight of entries equal to the pivot in the budget (``tie_share`` over the
    tensors that share the pivot); computed from ``w`` when the pivot is, else 1.0.
    ``check_finite=False`` skips the NaN/Inf scan (one extra read and a host sync).
    """
    d = _check(w, pattern, density, method, check_finite)
    if pivot is None:
        from kernels.pivot import find_pivot

        pivot = find_pivot(w, d, method="exact")
        tie = tie_share(w, pivot, d) if tie is None else tie
    tie = 1.0 if tie is None else float(tie)
    if not 0.0 <= tie <= 1.0:
        raise ValueError(f"tie must lie in [0, 1], got {tie}")
    if isinstance(pattern, Unstructured):
        return w.abs() >= pivot
    if method == "fast" and use_triton(w):
        from kernels._flex_triton import fast_mask_triton, has_fast_kernel

        if has_fast_kernel(pattern):
            return fast_mask_triton(w, pattern, pivot, seed, tie)
    return flex_mask_reference(w, pattern, d, method, seed, pivot, tie)


def flex_mask_reference(
    w: torch.Tensor, pattern: Pattern, density: float, method: str, seed: int, pivot: float, tie: float = 1.0
) -> torch.Tensor:
    """Plain-PyTorch flex-SS mask: tile counts, per-tile configuration by ``method``, selection.

    The budget of ``w`` is its wanted count #(|w| > pivot) + tie * #(|w| == pivot): with a pivot
    shared by many tensors (a whole model), each tensor keeps what the global Top-K gives it;
    ``density`` is the target the pivot was computed for (used for validation only)."""
    if isinstance(pattern, Unstructured):
        return w.abs() >= pivot
    mags, counts = tile_counts(w, pattern, pivot, tie)
    n = choose_configs(method, pattern, counts, round(float(counts.sum())), seed)
    return pattern.untile(pattern.select(mags, n), tuple(w.shape))


def mask_quality(w: torch.Tensor, mask: torch.Tensor, pattern: Pattern, density: float) -> dict[str, float]:
    """Achieved density and its error, retained |W| relative to the unconstrained top-k (same
    count), and pattern validity (1.0 / 0.0)."""
    k = round(density * w.numel())
    mag = w.detach().abs().float().flatten()
    topk = mag.topk(k).values.sum().item() if k else 0.0
    kept = (mag * mask.flatten()).sum().item()
    achieved = mask.float().mean().item()
    try:
        pattern.validate(mask)
        valid = 1.0
    except ValueError:
        valid = 0.0
    return {
        "achieved_density": achieved,
        "density_error": achieved - density,
        "retained_vs_topk": kept / topk if topk else 1.0,
        "valid": valid,
    }


__all__ = [
    "tie_share",
    "METHODS",
    "NM",
    "TBS",
    "Unstructured",
    "Vegeta",
    "bracket",
    "flex_mask",
    "flex_mask_reference",
    "mask_quality",
]
