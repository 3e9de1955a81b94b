"""The strong plain-PyTorch flex-SS baselines of FAST Fig. 3 (``torch`` and ``vegeta`` methods).

What an expert writes in PyTorch for the same job, so that FAST's speedups are measured against
something a reviewer would accept: device-only (no ``.item()``, ``int(tensor)`` or ``bool(tensor)``
inside a call, so a call can be captured in a CUDA graph), vectorised over tiles, 16-bit aware
(the pivot is a top-k over the 16-bit magnitudes; no float32 copy of all weights), and written so
that ``torch.compile`` fuses the elementwise work (``TorchFlexMasker(..., compile=True)``).

Both methods give the same masks as the readable reference ``kernels.ops.flex.flex_mask_reference``
with the same pivot and tie share (tests):

- ``torch`` (the PyTorch implementation): every tile at the lower bracketing configuration, the
  remaining budget to the tiles with the largest fractional part (one stable sort over all tiles).
- ``vegeta`` (the Vegeta-based method, our reading: docs/methods.md): every tile rounds to the
  nearer configuration, then the tiles nearest to the other choice move until the budget holds
  (one stable sort over the candidates).

Patterns with a single configuration (n:m, e.g. SR-STE's 2:4) need no pivot and no configuration
choice: the mask is the within-tile selection alone, and both methods reduce to it. The pivot of
the other patterns is ``torch.topk`` over the concatenated magnitudes (on an H100 the fastest of
top-k, sort and ``kthvalue``: ``docs/methods.md``), plus device counts for the tie share.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch

from kernels.ops.common import FLOAT_DTYPES, check_tensor
from kernels.ops.flex import WeightsGuard, bracket, check_flex_args, needs_pivot
from kernels.ops.patterns import TBS, Pattern, Unstructured, regular_patterns
from kernels.ops.pivot import kth_largest

BASELINE_METHODS = ("torch", "vegeta")


def pivot_and_tie(weights: list[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(pivot, tie share) as 0-dim float32 device tensors: the k-th largest |w| over all
    ``weights`` and the fraction of the entries equal to it that the budget k needs (float64
    quotient, as ``kernels.ops.flex.tie_share`` computes it on the host)."""
    return pivot_and_tie_of_flat(torch.cat([w.reshape(-1) for w in weights]), k)


def pivot_and_tie_of_flat(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``pivot_and_tie`` of the weights already concatenated into one 1-D tensor. The compiled
    masker compiles this, not ``pivot_and_tie``: a graph whose inputs are a whole model's weights
    (168 for MAP-NEO 460M), their dimensions marked dynamic by the TBS(8) masker, finished no
    compile in 7 minutes on an H200 (results/tuning/h200_probe_trainer_masker_a6d205f.txt); the
    one eager ``torch.cat`` costs one pass over the weights."""
    mags = flat.abs()
    if k == 0:
        inf = torch.full((), float("inf"), dtype=torch.float32, device=mags.device)
        return inf, torch.ones((), dtype=torch.float32, device=mags.device)
    pivot = kth_largest(mags, k)  # torch.topk, or a histogram select where its int32 k overflows
    m32 = mags.float()
    gt = (m32 > pivot).sum()
    eq = (m32 == pivot).sum()
    share = ((k - gt).double() / eq.clamp(min=1).double()).clamp(0.0, 1.0)
    share = torch.where(eq > 0, share, torch.ones_like(share))
    return pivot, share.float()


def _scatter_back(order: torch.Tensor, take: torch.Tensor) -> torch.Tensor:
    """``out[order] = take`` without an indexing write (stays one scatter kernel)."""
    return torch.zeros_like(take).scatter(0, order, take)


def choose_torch(lo: torch.Tensor, hi: torch.Tensor, p: torch.Tensor, unit: int, budget: torch.Tensor) -> torch.Tensor:
    """Largest-remainder allocation: all tiles at ``lo``, the rest of the budget to the largest ``p``."""
    cost = (hi - lo) * unit
    remaining = budget - (lo * unit).sum()
    order = torch.argsort(p, descending=True, stable=True)
    take = (torch.cumsum(cost[order], 0) <= remaining) & (p[order] > 0)
    return torch.where(_scatter_back(order, take), hi, lo)


def choose_vegeta(lo: torch.Tensor, hi: torch.Tensor, p: torch.Tensor, unit: int, budget: torch.Tensor) -> torch.Tensor:
    """Nearest configuration per tile, then the tiles nearest to the other choice move (up if the
    budget is short, down if it is exceeded) while the moved entries fit the difference."""
    cost = (hi - lo) * unit
    n = torch.where(p >= 0.5, hi, lo)
    deficit = budget - (n * unit).sum()
    up = deficit > 0
    cand = torch.where(up, n == lo, n == hi) & (cost > 0)
    key = torch.where(cand, torch.where(up, p, 1.0 - p), torch.full_like(p, -1.0))
    order = torch.argsort(key, descending=True, stable=True)
    fits = (torch.cumsum(cost[order], 0) <= deficit.abs()) & (key[order] >= 0)
    move = _scatter_back(order, fits) & (deficit != 0)
    return torch.where(move, torch.where(up, hi, lo), n)


_CHOOSE = {"torch": choose_torch, "vegeta": choose_vegeta}


def masks_of_weight(
    w: torch.Tensor,
    pattern: Pattern,
    method: str,
    configs: torch.Tensor,
    pivot: torch.Tensor,
    tie: torch.Tensor,
    table: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Mask of one weight given the shared pivot and tie share (device tensors), no host sync.
    ``table``: ``regular_table(x, device)`` for TBS(x <= 4) (built once by the caller)."""
    if isinstance(pattern, Unstructured):
        return w.abs() >= pivot
    mags = pattern.tiles(w.abs().float())
    if table is None and isinstance(pattern, TBS) and pattern.x <= 4:
        table = regular_table(pattern.x, w.device)
    if not needs_pivot(pattern):
        n = torch.full((mags.shape[0],), pattern.configs[0], dtype=torch.long, device=w.device)
    else:
        flat = mags.flatten(1)
        gt, eq = (flat > pivot).sum(1), (flat == pivot).sum(1)
        counts = gt.float() + eq.float() * tie
        lo, hi, p = bracket(configs, counts / pattern.unit)
        # exact integer counts, as kernels.ops.flex.budget_of (no order-dependent float32 sum)
        budget = gt.sum() + torch.round(eq.sum().double() * tie.double()).long()
        n = _CHOOSE[method](lo, hi, p, pattern.unit, budget)
    keep = pattern.select(mags, n) if table is None else _select_regular(mags, n, *table)
    return pattern.untile(keep, tuple(w.shape))


def regular_table(x: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every x-by-x layout with equal row and column sums, [P, x, x] bool, and its configuration [P]."""
    table = torch.cat([regular_patterns(x, k) for k in range(x + 1)]).to(device)
    return table, table.flatten(1).sum(1) // x


def _select_regular(mags: torch.Tensor, n: torch.Tensor, table: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """TBS(x <= 4)'s exact selection (``TBS._select_exact_small``) with the table of every
    regular layout passed in, so that a compiled graph holds it as an input."""
    dt = torch.float64 if mags.device.type == "cpu" else torch.float32
    scores = mags.flatten(1).to(dt) @ table.flatten(1).to(dt).T  # [T, P]
    scores = scores.masked_fill(sizes[None, :] != n[:, None], -torch.inf)
    return table[scores.argmax(1)]


class TorchFlexMasker:
    """Masks of weights that share one pivot, by a baseline method, set up once and called at
    every regeneration (``masks = masker()``), like ``kernels.ops.flex.FlexMasker`` for FAST.

    Validation, the budget k and the configuration tensor are prepared here; a call launches
    device work only. ``compile=True`` wraps the per-weight mask function and the pivot in
    ``torch.compile`` (fullgraph): the compiled form of the same code, with static shapes, but for
    TBS(x >= 8), whose mask function is compiled once for every weight shape (``masks_any_shape``).
    Returns new mask tensors on every call; ``masker(check=False)`` skips the non-finite check, the
    call's one host read.
    """

    def __init__(
        self,
        weights: torch.Tensor | list[torch.Tensor],
        pattern: Pattern,
        density: float,
        method: str = "torch",
        *,
        compile: bool = False,
    ) -> None:
        ws = [weights] if isinstance(weights, torch.Tensor) else list(weights)
        if not ws:
            raise ValueError("weights is empty: give at least one 2-D weight")
        if method not in BASELINE_METHODS:
            raise ValueError(f"unknown baseline method {method!r}; choose one of {BASELINE_METHODS}")
        for i, w in enumerate(ws):
            check_tensor(f"weights[{i}]", w, dtypes=FLOAT_DTYPES, ndim=2, finite=False)
        if len({(w.dtype, w.device) for w in ws}) != 1:
            raise ValueError("weights must share one dtype and one device")
        self.density = check_flex_args(ws[0], pattern, density, method, check_finite=False)
        for w in ws:
            pattern.check_shape(tuple(w.shape))
        self.pattern, self.method = pattern, method
        self.weights = [w.detach() for w in ws]
        self._guard = WeightsGuard(ws, "TorchFlexMasker")  # a call refuses weights replaced since
        self.k = round(self.density * sum(w.numel() for w in ws))
        device = ws[0].device
        self.configs = torch.tensor(pattern.configs, dtype=torch.float32, device=device)
        self._zero = torch.zeros((), dtype=torch.float32, device=device)
        self._one = torch.ones((), dtype=torch.float32, device=device)
        small_tbs = isinstance(pattern, TBS) and pattern.x <= 4
        self.table = regular_table(pattern.x, device) if small_tbs else None
        self._pivot_of_flat: Callable = pivot_and_tie_of_flat
        self._mask: Callable = masks_of_weight
        self.compiled = compile
        if compile:
            self._pivot_of_flat = torch.compile(pivot_and_tie_of_flat, fullgraph=True, dynamic=False)
            self._mask = compiled_masks_of_weight(pattern, self.weights)

    def _pivot(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._pivot_of_flat(torch.cat([w.reshape(-1) for w in self.weights]), self.k)

    @torch.no_grad()
    def __call__(self, *, check: bool = True) -> list[torch.Tensor]:
        """The masks of the current weights (new tensors). ``check`` (as ``FlexMasker``'s): raise
        on NaN or Inf weights, which costs one host read after the masks are queued; ``check=False``
        keeps the call device-only (timing, CUDA-graph capture). Raises RuntimeError on a weight
        replaced or resized since set-up (``WeightsGuard``: host-only)."""
        self._guard.check()
        # every (shape, pattern, method) is its own static graph: allow as many as a suite needs
        with recompile_limit(1024) if self.compiled else contextlib.nullcontext():
            if needs_pivot(self.pattern):
                pivot, tie = self._pivot()
            else:
                pivot, tie = self._zero, self._one
            masks = [
                self._mask(w, self.pattern, self.method, self.configs, pivot, tie, self.table) for w in self.weights
            ]
        if check and not bool(torch.stack([torch.isfinite(w).all() for w in self.weights]).all()):
            raise ValueError("weights contain NaN or Inf; refusing to compute masks on non-finite values")
        return masks


@functools.cache
def masks_any_shape(backend: object = "inductor") -> Callable:
    """``masks_of_weight`` compiled (fullgraph) for weights whose two dimensions are marked dynamic:
    one graph per pattern and method serves every weight shape of every model. For TBS(x >= 8):
    its selection (two starts, two sweeps of row-pair swaps) unrolls into a graph that takes about
    40 s to compile on a GPU host per static shape (9 minutes on a CPU), so static shapes would cost
    minutes per model. ``backend``: for tests (dynamo's own counters).

    Inductor's on-disk FX graph cache is off for this graph: its key names the symbolic sizes, not
    their hints, so a graph compiled for other sizes (the GPU tests' small weights) would be reused
    with kernels tuned for them. The likely cause of what an H200 showed at a6d205f: after the GPU
    tests the compiled TBS(8) baseline took 14.3 s on MAP-NEO 7B, slower than eager (9.5 s), where
    figure3 first on a fresh machine (01a159e) took 4.0 s."""
    options = {"fx_graph_cache": False} if backend == "inductor" else None
    compiled = torch.compile(_masks_of_weight_any_shape, fullgraph=True, backend=backend, options=options)

    def masks(*args: object) -> list[torch.Tensor]:
        # only the dimensions marked dynamic: with automatic dynamic shapes, a recompile (a new
        # pattern or method) would make the pattern's own integers (x) symbolic, which its checks
        # cannot format (dynamo: "BUILD_STRING type error", figure3 at 47b55c9 on an H200)
        # Set and restored by hand: this runs once a weight, and config.patch costs 30-170 us a
        # call on a CPU here against 7 us for the two assignments
        cfg = torch._dynamo.config
        saved = cfg.automatic_dynamic_shapes
        cfg.automatic_dynamic_shapes = False
        try:
            return compiled(*args)
        finally:
            cfg.automatic_dynamic_shapes = saved

    return masks


def _masks_of_weight_any_shape(*args: object) -> torch.Tensor:
    """``masks_of_weight`` under a code object of its own: dynamo keeps its automatic-dynamic
    state per code object, and the static compiles of ``masks_of_weight`` (other patterns, whose
    x differs) must not make this graph's integers dynamic."""
    return masks_of_weight(*args)


def compiled_masks_of_weight(pattern: Pattern, weights: list[torch.Tensor]) -> Callable:
    """The compiled ``masks_of_weight`` for ``weights`` (the caller's own detached tensors): static
    shapes, but for TBS(x >= 8) one graph for every shape, the weights' dimensions marked dynamic."""
    if not (isinstance(pattern, TBS) and pattern.x >= 8):
        return torch.compile(masks_of_weight, fullgraph=True, dynamic=False)
    for w in weights:
        torch._dynamo.maybe_mark_dynamic(w, 0)
        torch._dynamo.maybe_mark_dynamic(w, 1)
    return masks_any_shape()


def recompile_limit(n: int) -> contextlib.AbstractContextManager:
    """Raise dynamo's per-function recompile limit for the calls inside (named
    ``recompile_limit`` in torch >= 2.6, ``cache_size_limit`` before)."""
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    return cfg.patch(**{name: max(n, getattr(cfg, name))})


__all__ = [
    "BASELINE_METHODS",
    "TorchFlexMasker",
    "choose_torch",
    "choose_vegeta",
    "compiled_masks_of_weight",
    "masks_any_shape",
    "masks_of_weight",
    "needs_pivot",
    "pivot_and_tie",
    "pivot_and_tie_of_flat",
    "recompile_limit",
]
