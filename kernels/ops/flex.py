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
  and within-tile selection are one Triton pass over the weight (``kernels/ops/_flex_triton.py``).

Within-tile selection is the pattern's (``Pattern.select``): exact for TBS(4) and n:m/Vegeta,
for TBS(x >= 8) two permutation starts improved by row-pair swaps
(``kernels.ops.patterns.tbs_select_swaps``). All three methods use the same selection, so
they differ only in the per-tile configuration (and in speed).
"""

from __future__ import annotations

import math
import numbers

import torch

from kernels.ops import common
from kernels.ops.common import FLOAT_DTYPES, check_int, check_tensor, use_triton
from kernels.ops.patterns import NM, TBS, Pattern, Unstructured, Vegeta


def needs_pivot(pattern: Pattern) -> bool:
    """Whether mask generation needs the global pivot: not for a single fixed configuration
    (n:m such as SR-STE's 2:4), whose mask is the within-tile selection alone."""
    return isinstance(pattern, Unstructured) or len(pattern.configs) > 1


METHODS = ("torch", "vegeta", "fast")


def check_density(density: object) -> float:
    if isinstance(density, bool) or not isinstance(density, (int, float)):
        raise TypeError(f"density must be a real number in [0, 1], got {density!r}")
    d = float(density)
    if not (0.0 <= d <= 1.0) or math.isnan(d):
        raise ValueError(f"density must lie in [0, 1] (fraction of weights kept), got {density!r}")
    return d


def bracket(
    configs: tuple[int, ...] | torch.Tensor, n_real: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(lo, hi, p): the configurations bracketing each tile's wanted configuration and the
    probability of ``hi`` that makes the expected kept count exact (clamped to the set's ends).
    ``configs`` may be a float32 tensor on the device prepared once (no host copy per call)."""
    if isinstance(configs, torch.Tensor):
        c = configs
    else:
        c = torch.tensor(configs, dtype=torch.float32, device=n_real.device)
    x = n_real.float().clamp(c[0], c[-1])
    i_hi = torch.searchsorted(c, x, right=False).clamp(max=c.numel() - 1)
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


def budget_of(mags: torch.Tensor, pivot: float, tie: float) -> int:
    """A weight's budget: #(|w| > pivot) + round(tie * #(|w| == pivot)), from exact integer counts
    and the float32 tie share the kernels see (a float32 sum of the per-tile counts would depend
    on the order of the additions, and a compiled baseline adds in another order)."""
    flat = mags.reshape(-1)
    gt = int((flat > pivot).sum())
    eq = int((flat == pivot).sum())
    return gt + round(eq * float(torch.tensor(tie, dtype=torch.float32)))


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
        # stable: among equal keys the lower tile index moves first (a well-defined order that
        # the device-only baseline, kernels.ops.flex_torch, reproduces)
        idx = torch.argsort(key, descending=True, stable=True)[:k]
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
        from kernels.ops._flex_triton import tile_uniforms

        return tile_uniforms(seed, n, device)
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.rand(n, generator=g, device=device)


def fast_mask(w: torch.Tensor, pattern: Pattern, pivot: float, seed: int, tie: float = 1.0) -> torch.Tensor:
    """The fused Triton mask kernel of ``pattern`` on a 2-D weight (Triton must run, see
    ``use_triton``), unchecked: no value scan and no host sync, so a call can be captured in a CUDA
    graph. The entry point to the flex family's Triton twin for code outside ``kernels.ops``."""
    from kernels.ops._flex_triton import fast_mask_triton

    return fast_mask_triton(w, pattern, pivot, seed, tie)


def check_flex_args(w: torch.Tensor, pattern: object, density: object, method: str, check_finite: bool) -> float:
    check_tensor("w", w, dtypes=FLOAT_DTYPES, ndim=2, finite=check_finite)
    if not isinstance(pattern, Pattern):
        raise TypeError(
            f"pattern must be a kernels.ops.patterns.Pattern (TBS, Vegeta, NM, Unstructured), got {pattern!r}"
        )
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    d = check_density(density)
    pattern.check_shape(tuple(w.shape))
    if len(pattern.configs) == 1 and abs(d - pattern.density(pattern.configs[0])) > 1e-12:
        raise ValueError(f"{pattern.name} fixes the density at {pattern.density(pattern.configs[0])}, got {d}")
    return d


_SEED_LIMIT = 1 << 31  # seeds stay int32 kernel arguments (one compiled variant, direct launches)


def _check_seed(seed: object) -> int:
    """The one seed check of ``flex_mask`` and ``FlexMasker``: an int in [0, 2**31)."""
    return check_int("seed", seed, lo=0, hi=_SEED_LIMIT - 1)


def _check_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    return float(value)


def _check_pivot(pivot: object) -> float | None:
    """None, or a real number that is not NaN (every comparison with NaN is False: the mask
    would silently keep nothing). A negative pivot is allowed: |w| >= 0 > pivot, so every entry
    counts as above it; +inf keeps nothing."""
    if pivot is None:
        return None
    p = _check_real("pivot", pivot)
    if math.isnan(p):
        raise ValueError("pivot must not be NaN (no |w| compares with it: the mask would be empty)")
    return p


def _unstructured_mask(
    w: torch.Tensor, pivot: float | torch.Tensor, tie: float | torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Unstructured mask with the tie rule: every entry with |w| > pivot, and of the entries with
    |w| == pivot the first round(tie * #(|w| == pivot)) in flat (row-major) index order (ties to
    the lower index; ``round`` half to even, in float64).

    ``pivot`` and ``tie``: Python floats (magnitudes compared in float32, as ``tile_counts``
    does), or 0-dim device tensors (the masker's state; magnitudes compared in w's dtype, which
    holds such a pivot exactly): then only device ops, no host sync. Written into ``out`` if given."""
    a = w.abs()
    if not isinstance(pivot, torch.Tensor):
        a = a.float()
    keep = torch.gt(a, pivot) if out is None else torch.gt(a, pivot, out=out)
    eq = torch.eq(a, pivot).reshape(-1)  # row-major order whatever w's strides
    idx = torch.int32 if eq.numel() < 2**31 else torch.int64
    need = torch.round(eq.sum(dtype=torch.float64) * tie).to(idx)
    first = eq & (torch.cumsum(eq, 0, dtype=idx) <= need)
    keep |= first.reshape(keep.shape)
    return keep


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
    ``seed``: an int in [0, 2**31) (the draws of ``method="fast"``; checked for every method, as
    ``FlexMasker`` does). ``pivot`` must not be NaN; a negative pivot keeps every entry.

    ``Unstructured()`` meets the budget with ties: it keeps every |w| > pivot and, of the entries
    equal to the pivot, the first round(tie * #(|w| == pivot)) in flat (row-major) index order
    (ties to the lower index). With the pivot computed here (single tensor) the tie share is
    (k - #(|w| > pivot)) / #(|w| == pivot), so exactly k = round(density * numel) entries are
    kept; with a shared pivot, this tensor keeps round(tie * its own #(|w| == pivot)) of its ties.
    """
    d = check_flex_args(w, pattern, density, method, check_finite)
    seed = _check_seed(seed)
    pivot = _check_pivot(pivot)
    if pivot is None and not needs_pivot(pattern):  # one fixed configuration: no pivot needed
        pivot, tie = 0.0, 1.0
    if pivot is None:
        from kernels.ops.pivot import find_pivot

        pivot = find_pivot(w, d, method="exact")
        tie = tie_share(w, pivot, d) if tie is None else tie
    tie = 1.0 if tie is None else _check_real("tie", tie)
    if not 0.0 <= tie <= 1.0:
        raise ValueError(f"tie must lie in [0, 1], got {tie}")
    if isinstance(pattern, Unstructured):
        return _unstructured_mask(w, pivot, tie)
    if method == "fast" and use_triton(w):
        from kernels.ops._flex_triton import fast_mask_triton, has_fast_kernel

        if has_fast_kernel(pattern):
            return fast_mask_triton(w, pattern, pivot, seed, tie)
    return flex_mask_reference(w, pattern, d, method, seed, pivot, tie)


def flex_mask_reference(
    w: torch.Tensor, pattern: Pattern, density: float, method: str, seed: int, pivot: float, tie: float = 1.0
) -> torch.Tensor:
    """Plain-PyTorch flex-SS mask: tile counts, per-tile configuration by ``method``, selection.

    The budget of ``w`` is its wanted count #(|w| > pivot) + tie * #(|w| == pivot): with a pivot
    shared by many tensors (a whole model), each tensor keeps what the global Top-K gives it;
    ``density`` is the target the pivot was computed for (used for validation only).

    ``Unstructured()`` here is the plain threshold |w| >= pivot (every tie kept; the PyTorch
    baselines of ``kernels.ops.flex_torch`` reproduce it); ``flex_mask`` and ``FlexMasker`` apply the
    tie share to it (see ``flex_mask``)."""
    if isinstance(pattern, Unstructured):
        return w.abs() >= pivot
    mags, counts = tile_counts(w, pattern, pivot, tie)
    n = choose_configs(method, pattern, counts, budget_of(mags, pivot, tie), seed)
    return pattern.untile(pattern.select(mags, n), tuple(w.shape))


class WeightsGuard:
    """What a masker's weights were at set-up (storage, shape, dtype), checked at every call.

    Why: a masker reads views of the weights it was given, so ``param.data = new`` (or a resize)
    after set-up would leave it masking the old storage: a silent wrong answer. ``check()`` is
    host-only (no device work, no sync), so it runs under CUDA-graph capture too. A weight
    replaced as a whole (``module.weight = nn.Parameter(...)``) cannot be seen here: the masker
    holds the old object; build a new masker for it."""

    def __init__(self, weights: list[torch.Tensor], owner: str) -> None:
        self.weights, self.owner = list(weights), owner
        self.keys = [self._key(w) for w in self.weights]

    @staticmethod
    def _key(w: torch.Tensor) -> tuple[int, tuple[int, ...], torch.dtype, torch.device]:
        return w.data_ptr(), tuple(w.shape), w.dtype, w.device

    def check(self) -> None:
        """Raise RuntimeError if any weight's storage, shape, dtype or device changed since set-up."""
        for i, (w, key) in enumerate(zip(self.weights, self.keys, strict=True)):
            if self._key(w) != key:
                raise RuntimeError(
                    f"weights[{i}] was replaced or resized after the {self.owner} was set up (its storage, "
                    f"shape, dtype or device changed, e.g. `param.data = ...`); the masker would mask the old "
                    f"storage. Update weights in place (optimizers do) or build a new {self.owner}."
                )


class FlexMasker:
    """FAST masks of weights that share one pivot (a block, a model, a shard), set up once and
    called at every regeneration: ``masks = masker()``.

    Why: the fused kernels take microseconds on a GPU, while ``flex_mask`` per weight plus a host
    pivot pay tens of microseconds of Python, validation, allocation and Triton launch per call,
    and one host sync (the 384 histogram counts). The masker validates dtypes, shapes, pattern and
    density once, preallocates the masks and scratch, binds every launch once, and keeps the pivot
    on the device: the pivot's passes (reading up to 8 weights in place per launch; 16-bit
    weights from 2**20 values the window pivot, ``kernels.ops._pivot_triton.window_pivot_launches``;
    float32 weights, a trainer's master weights, the four-pass radix select of
    ``kernels.ops._pivot_radix_triton``, from 2**20 values over the window of
    ``kernels.ops._pivot_f32_triton``), its select
    (pivot and tie share into ``state``) and the mask kernels (which read ``state``; below
    ``MULTI_MAX_VALUES`` one launch for up to 8 weights, the masks being views of one buffer)
    run back to back with no host round trip, so a call can be captured in a CUDA graph. ``pdl``
    (default: below
    ``MULTI_MAX_VALUES``, where the GPU and Triton allow it) chains the launches with
    programmatic dependent launch, so each launches while the one before it runs (same
    results). The weights are read through views taken here: update them in place (optimizers
    do); a call raises RuntimeError on a weight whose storage, shape or dtype changed since
    (``param.data = ...``, a resize: ``WeightsGuard``).

    ``masker(check=True)`` reads the device non-finite count once, after every launch, and raises
    ValueError on NaN/Inf weights (the masks are then meaningless). ``check=False`` (for CUDA-graph
    capture) skips that read: the count stays in ``nonfinite`` (a 0-dim device tensor) for the
    caller to inspect. Returns the preallocated masks, overwritten by the next call (clone what
    you keep).

    ``Unstructured()`` follows ``flex_mask``'s tie rule with the exact tie share of all weights,
    (k - #(|w| > pivot)) / #(|w| == pivot) in float64 (``pivot_and_tie`` reports its float32
    rounding): each weight keeps its |w| > pivot and the first round(share * its #(|w| == pivot))
    entries equal to the pivot (flat index order), so the total is k to within len(weights) / 2,
    exactly k for a single weight. Device ops only (a cumulative sum over the equality mask).

    Fallbacks (same masks as ``flex_mask(w, pattern, density, "fast", seed, pivot, tie=tie)`` with
    the exact pivot and tie share of all weights): without Triton (CPU, no interpreter) the
    references (``pivot_and_tie_16bit_reference`` / ``find_pivot`` + ``tie_share``,
    ``flex_mask_reference``); patterns without a fused kernel read the pivot back. Those paths
    sync with the host and raise on non-finite weights whatever ``check`` says. ``fast_launch``:
    after a warm-up at construction (CUDA), launch the compiled kernels directly
    (``kernels.ops.common``), checked once against Triton's launches.
    """

    def __init__(
        self,
        weights: torch.Tensor | list[torch.Tensor],
        pattern: Pattern,
        density: float,
        seed: int = 0,
        *,
        fast_launch: bool = True,
        pdl: bool | None = None,
    ) -> None:
        if isinstance(weights, torch.Tensor):
            ws = [weights]
        elif isinstance(weights, (list, tuple)):
            ws = list(weights)
        else:
            raise TypeError(f"weights must be a Tensor or a list of Tensors, got {type(weights).__name__}")
        if not ws:
            raise ValueError("weights is empty: give at least one 2-D weight")
        for i, w in enumerate(ws):
            check_tensor(f"weights[{i}]", w, dtypes=FLOAT_DTYPES, ndim=2, finite=False)
        if len({w.dtype for w in ws}) != 1:
            raise TypeError(f"weights must share one dtype, got {sorted({str(w.dtype) for w in ws})}")
        if len({w.device for w in ws}) != 1:
            raise ValueError(f"weights must be on one device, got {sorted({str(w.device) for w in ws})}")
        for i, w in enumerate(ws):
            if not w.is_contiguous():
                raise ValueError(f"weights[{i}] is not contiguous (the masker reads views of the weights)")
        self.density = check_flex_args(ws[0], pattern, density, "fast", check_finite=False)
        for i, w in enumerate(ws):
            try:
                pattern.check_shape(tuple(w.shape))
            except ValueError as e:
                raise ValueError(f"weights[{i}] (shape {tuple(w.shape)}): {e}") from None
        self.pattern = pattern
        self.seed = _check_seed(seed)
        self.weights = [w.detach() for w in ws]
        self._guard = WeightsGuard(ws, "FlexMasker")
        self.device = ws[0].device
        self.dtype = ws[0].dtype
        self.n = sum(w.numel() for w in ws)
        if self.n == 0:
            raise ValueError("weights are all empty: nothing to mask")
        self.k = round(self.density * self.n)
        # one buffer holds every mask (16-element aligned views), so one launch writes them all
        ends = [0]
        for w in ws:
            ends.append(ends[-1] + -(-w.numel() // 16) * 16)
        self._mask_buffer = torch.zeros(ends[-1], dtype=torch.bool, device=self.device)
        self.masks = [self._mask_buffer[a : a + w.numel()].view(w.shape) for a, w in zip(ends, ws, strict=False)]
        self.state = torch.zeros(2, dtype=torch.float32, device=self.device)  # pivot, tie share
        self.tie64 = torch.ones((), dtype=torch.float64, device=self.device)  # exact share (Unstructured)
        self._triton = use_triton(ws[0])
        self._needs_pivot = needs_pivot(pattern)
        self._device_pivot = self._triton and self._needs_pivot
        # 16-bit weights: the 16-bit key histograms (kernels.ops._pivot_triton); float32 weights
        # (a trainer's master weights): the four-pass radix select (kernels.ops._pivot_radix_triton)
        self._radix = self._device_pivot and self.dtype == torch.float32
        self._f32_window = False
        if self._radix:
            from kernels.ops._pivot_f32_triton import F32_WINDOW_COUNTS_LEN, F32_WINDOW_MIN_VALUES, compact_capacity
            from kernels.ops._pivot_radix_triton import COUNTS_LEN as counts_len
            from kernels.ops._pivot_radix_triton import EQ, GT, NONFINITE

            # from 2**20 values the float32 window pivot (its radix passes over a compacted window)
            self._f32_window = self.n >= F32_WINDOW_MIN_VALUES and self.k > 0
            if self._f32_window:
                counts_len = F32_WINDOW_COUNTS_LEN
                self._compact = torch.empty(compact_capacity(self.n), dtype=torch.float32, device=self.device)
        else:
            from kernels.ops._pivot_triton import EQ, GT, NONFINITE
            from kernels.ops._pivot_triton import WINDOW_COUNTS_LEN as counts_len

        # the histogram bins (zeroed again by the select kernel), then non-finite, gt, eq counts
        # (16-bit: then the window pivot's bins, kernels.ops._pivot_triton.window_pivot_launches)
        self.counts = torch.zeros(counts_len, dtype=torch.int64, device=self.device)
        self.nonfinite = self.counts[NONFINITE]
        self.nonfinite_index = NONFINITE
        self._gt_eq = (GT, EQ)
        from kernels.ops._chain_triton import pdl_supported
        from kernels.ops._flex_triton import MULTI_MAX_VALUES

        # chained launches (programmatic dependent launch) where the GPU and Triton allow them;
        # by default only for small blocks (see MULTI_MAX_VALUES); the radix kernels take no PDL flag
        small = self.n < MULTI_MAX_VALUES
        self.pdl = pdl_supported(self.device) and not self._radix and (small if pdl is None else bool(pdl))
        if not self._needs_pivot:  # fixed n:m: the state is never read (pivot NaN says so)
            self.state[0] = float("nan")
        self._fused = self._triton and (isinstance(pattern, Unstructured) or self._has_kernel())
        self._pivot_launches = self._build_pivot() if self._device_pivot else []
        self._mask_launches = self._build_masks() if self._fused else []
        if self.pdl and self._fused:
            self._chain()
        self.direct = False
        if self.device.type == "cuda":
            self._warm_up(fast_launch)

    # -- set-up ------------------------------------------------------------------------------

    def _has_kernel(self) -> bool:
        from kernels.ops._flex_triton import has_fast_kernel

        return has_fast_kernel(self.pattern)

    def _build_pivot(self) -> list:
        """The pivot's launches: from 2**20 values the window pivot (a sample places a 16-key window,
        one counting pass; the two histogram passes only where it misses), else the two passes."""
        from kernels.ops import _pivot_triton as pt
        from kernels.ops._pivot_triton import MAX_TENSORS, hist16_launch, select16_launch

        if self._radix:
            return self._build_radix_pivot()
        flats16 = [w.view(-1).view(torch.int16) for w in self.weights if w.numel()]
        if self.n >= pt.WINDOW_MIN_VALUES:
            return [
                common.Launch(*x)
                for x in pt.window_pivot_launches(flats16, self.counts, self.state, self.k, self.dtype)
            ]
        groups = [flats16[i : i + MAX_TENSORS] for i in range(0, len(flats16), MAX_TENSORS)]
        launches = [hist16_launch(g, self.counts, self.k, p) for p in (1, 2) for g in groups]
        launches.append(select16_launch(self.counts, self.state, self.k, self.dtype, True))
        return [common.Launch(*x) for x in launches]

    def _build_radix_pivot(self) -> list:
        """float32 weights: four histogram passes of 8-bit digits of |w| (up to 8 weights read in
        place per launch), then the select, which writes pivot and tie share into ``state`` and
        leaves the bins zeroed; exact, as ``find_pivot(method="exact")`` and ``tie_share``. From
        2**20 values the passes read only a window of |w| that a sample places and one counting
        pass compacts (``kernels.ops._pivot_f32_triton``; every value where the window misses)."""
        from kernels.ops._pivot_radix_triton import radix_hist_passes, radix_select_launch

        flats = [w.view(-1) for w in self.weights if w.numel()]
        if self._f32_window:
            from kernels.ops._pivot_f32_triton import f32_window_pivot_launches

            launches = f32_window_pivot_launches(flats, self.counts, self._compact, self.state, self.k)
            return [common.Launch(*x) for x in launches]
        launches = [x for pass_ in radix_hist_passes(flats, self.counts, self.k) for x in pass_]
        launches.append(radix_select_launch(self.counts, self.state, self.k, clear=True))
        return [common.Launch(*x) for x in launches]

    def _chain(self) -> None:
        """Chain the pivot's and the masks' launches (``pdl``) as one sequence."""
        raw = [(x.kernel, x.grid, x.args, x.warps) for x in self._pivot_launches + self._mask_launches]
        chained = common.chain(raw)
        n = len(self._pivot_launches)
        self._pivot_launches, self._mask_launches = chained[:n], chained[n:]

    def _build_masks(self) -> list:
        if isinstance(self.pattern, Unstructured):
            return []
        from kernels.ops._flex_triton import MULTI_MAX_VALUES, mask_launch, multi_mask_launches

        pairs = [(w, m) for w, m in zip(self.weights, self.masks, strict=True) if w.numel()]
        if not pairs:
            return []
        if self.n >= MULTI_MAX_VALUES:  # large weights: one launch each (see MULTI_MAX_VALUES)
            return [common.Launch(*mask_launch(w, m, self.pattern, self.state, self.seed)) for w, m in pairs]
        ws, ms = zip(*pairs, strict=True)
        launches = multi_mask_launches(list(ws), list(ms), self._mask_buffer, self.pattern, self.state, self.seed)
        return [common.Launch(*x) for x in launches]

    def _warm_up(self, fast_launch: bool) -> None:
        """Compile and run once; then switch to direct launches if they give the same result."""
        try:
            self(check=False)
        except ValueError:  # a host-pivot path on non-finite weights: no warm-up, no direct launches
            return
        launches = self._pivot_launches + self._mask_launches
        if not fast_launch or not launches or any(x.compiled is None for x in launches):
            return
        want = [m.clone() for m in self.masks], self.state.clone(), self.counts.clone()
        for m in self.masks:  # poison every output, so that a launch that does nothing shows
            m.fill_(True)
        if self._needs_pivot:  # a fixed n:m pattern never writes the state
            self.state.fill_(float("nan"))
        if self._device_pivot:  # the host-pivot path writes the state but no counts
            self.counts[self.nonfinite_index : self.nonfinite_index + 3].fill_(-1)  # non-finite, gt, eq
        for x in launches:
            x.direct = True
        self.direct = True
        try:
            self(check=False)
            ok = all(torch.equal(a, b) for a, b in zip(self.masks, want[0], strict=True))
            ok = ok and torch.equal(self.state.view(torch.int32), want[1].view(torch.int32))
            ok = ok and (not self._device_pivot or torch.equal(self.counts, want[2]))
        except Exception as e:  # noqa: BLE001 (any failure: keep Triton's launches)
            ok, why = False, repr(e)
        else:
            why = "results differ from Triton's launches"
        if not ok:
            import warnings

            self.counts.zero_()
            for x in launches:
                x.direct = False
            warnings.warn(f"FlexMasker: direct launches disabled ({why})", RuntimeWarning, stacklevel=3)
        self.direct = ok

    def reseed(self, seed: int) -> None:
        """Use ``seed`` for the draws of the next calls (a captured graph keeps its own)."""
        self.seed = _check_seed(seed)
        self._mask_launches = [x.with_arg(4, self.seed) for x in self._mask_launches]

    # -- generation --------------------------------------------------------------------------

    def __call__(self, *, check: bool = True) -> list[torch.Tensor]:
        """The masks of the current weights (preallocated; overwritten by the next call)."""
        self._guard.check()
        if not self._needs_pivot:
            return self._fixed_call(check)
        if not self._device_pivot:
            return self._host_pivot_call()
        stream = common.direct_stream(self.device) if self.direct else None
        try:
            for x in self._pivot_launches:
                x(stream)
            self._masks_from_state(stream)
        except BaseException:
            self.counts.zero_()  # the select kernel did not clear the bins
            raise
        if check and int(self.nonfinite):
            raise ValueError("weights contain NaN or Inf; refusing to compute masks on non-finite values")
        return list(self.masks)

    def _masks_from_state(self, stream: int | None) -> None:
        if isinstance(self.pattern, Unstructured):
            self._unstructured_masks()
        elif self._fused:
            for x in self._mask_launches:
                x(stream)
        else:  # no fused kernel for this pattern: the reference, with the pivot read back
            pivot, tie = self.state.tolist()
            for w, m in zip(self.weights, self.masks, strict=True):
                m.copy_(flex_mask_reference(w, self.pattern, self.density, "fast", self.seed, pivot, tie))

    def _unstructured_masks(self) -> None:
        """Unstructured masks from the pivot in ``state`` and the float64 share ``tie64`` (on the
        device-pivot path computed here from the select kernel's counts); no host sync."""
        if self._device_pivot:
            gt, eq = (self.counts[i].double() for i in self._gt_eq)
            # as the host computes it: min(1, max(0, (k - gt) / eq)), 1.0 without ties
            self.tie64.copy_(((self.k - gt) / eq.clamp(min=1.0)).clamp(0.0, 1.0).masked_fill(eq == 0, 1.0))
        for w, m in zip(self.weights, self.masks, strict=True):
            _unstructured_mask(w, self.state[0], self.tie64, out=m)

    def _fixed_call(self, check: bool) -> list[torch.Tensor]:
        """One fixed configuration (n:m): the mask kernels alone, no pivot. ``check`` scans the
        weights for NaN/Inf (one extra read and a host sync); ``check=False`` does not."""
        if check:
            for i, w in enumerate(self.weights):
                if w.numel() and not bool(torch.isfinite(w).all()):
                    raise ValueError(f"weights[{i}] contains NaN or Inf; refusing to compute masks on them")
        if self._fused:
            stream = common.direct_stream(self.device) if self.direct else None
            for x in self._mask_launches:
                x(stream)
        else:
            for w, m in zip(self.weights, self.masks, strict=True):
                m.copy_(flex_mask_reference(w, self.pattern, self.density, "fast", self.seed, 0.0, 1.0))
        return list(self.masks)

    def _host_pivot_call(self) -> list[torch.Tensor]:
        """Without Triton (CPU, no interpreter): the references, pivot on the host."""
        from kernels.ops.pivot import find_pivot, pivot_and_tie_16bit_reference

        if self.dtype in (torch.bfloat16, torch.float16):
            pivot, tie = pivot_and_tie_16bit_reference(self.weights, self.density)  # raises on NaN/Inf
        else:
            pivot = find_pivot(self.weights, self.density, method="exact")  # raises on NaN/Inf
            tie = tie_share(self.weights, pivot, self.density)
        self.state.copy_(torch.tensor([pivot, tie], dtype=torch.float32))
        self.tie64.fill_(tie)
        if isinstance(self.pattern, Unstructured):
            self._unstructured_masks()
        else:
            tie = float(self.state[1])  # float32, as a kernel would see it
            for w, m in zip(self.weights, self.masks, strict=True):
                m.copy_(flex_mask_reference(w, self.pattern, self.density, "fast", self.seed, pivot, tie))
        return list(self.masks)

    def copy_masks(self) -> list[torch.Tensor]:
        """The current masks as new tensors, for a caller that keeps them past the next call (a
        trainer comparing regenerations): one copy of the buffer that holds them all, viewed per
        weight, where a copy a mask would cost a launch each."""
        buf = self._mask_buffer.clone()
        return [buf.as_strided(m.shape, m.stride(), m.storage_offset()) for m in self.masks]

    def pivot_and_tie(self) -> tuple[float, float]:
        """(pivot, tie share) of the last call, read from the device (a host sync); the share as
        float32 (what the mask kernels read; ``tie64`` holds it in float64)."""
        pivot, tie = self.state.tolist()
        return pivot, tie


def mask_quality(w: torch.Tensor, mask: torch.Tensor, pattern: Pattern, density: float) -> dict[str, float]:
    """Achieved density and its error, retained |W| relative to the unconstrained top-k (same
    count), and pattern validity (1.0 / 0.0). Raises on a mask of another shape or device, a
    density outside [0, 1] and non-finite weights (whose retained share means nothing)."""
    check_tensor("w", w, dtypes=FLOAT_DTYPES)
    check_tensor("mask", mask, dtypes=(torch.bool,))
    common.check_same_shape(w=w, mask=mask)
    common.check_same_device(w=w, mask=mask)
    density = check_density(density)
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
    "FlexMasker",
    "WeightsGuard",
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
