"""Flexible structured sparsity (flex-SS) patterns as objects.

A pattern cuts a 2-D weight into tiles; every tile picks a configuration n from the pattern's
configuration set, and a tile with configuration n keeps ``n * unit`` entries laid out by the
pattern's rule. Readings of the (terse) FAST paper are documented in docs/methods.md:

- ``TBS(x)``: x-by-x tiles; configuration n keeps exactly n per row AND per column of the tile
  (transposable); configurations 0..x by default. unit = x.
- ``Vegeta(m, tile_len)``: (1, tile_len) row segments cut into groups of m consecutive entries;
  every group of a tile keeps the same n (n:m), n from {0, m/4, m/2, m} by default (VEGETA's
  1:4, 2:4, 4:4 for m=4, plus empty). unit = tile_len / m.
- ``NM(n, m)``: fixed n:m on (1, m) groups (SR-STE's 2:4). unit = 1, one configuration.
- ``Unstructured()``: (1, 1) tiles, keep or not. unit = 1.

Each pattern validates a mask (raising with the first offending tile), reports per-tile
configuration and density, and selects within tiles given each tile's configuration (plain
PyTorch reference; Triton versions live in ``kernels.ops.flex``).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import torch

from kernels.ops.common import check_divisible, check_int


class Pattern:
    """Base class: tile geometry, configuration set, validation and within-tile selection."""

    tile: tuple[int, int]
    configs: tuple[int, ...]
    unit: int

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def tile_elems(self) -> int:
        return self.tile[0] * self.tile[1]

    def kept(self, n: int) -> int:
        """Entries kept by a tile with configuration ``n``."""
        return n * self.unit

    def density(self, n: int) -> float:
        return self.kept(n) / self.tile_elems

    def check_shape(self, shape: tuple[int, ...]) -> None:
        if len(shape) != 2:
            raise ValueError(f"{self.name} needs a 2-D weight, got shape {tuple(shape)}")
        check_divisible("weight rows", shape[0], self.tile[0], f"{self.name} tile height")
        check_divisible("weight columns", shape[1], self.tile[1], f"{self.name} tile width")

    def tiles(self, w: torch.Tensor) -> torch.Tensor:
        """[R, C] -> [T, th, tw], tiles in row-major tile order."""
        self.check_shape(tuple(w.shape))
        th, tw = self.tile
        r, c = w.shape
        return w.reshape(r // th, th, c // tw, tw).permute(0, 2, 1, 3).reshape(-1, th, tw)

    def untile(self, t: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
        th, tw = self.tile
        r, c = shape
        return t.reshape(r // th, c // tw, th, tw).permute(0, 2, 1, 3).reshape(r, c)

    def tile_configs(self, mask: torch.Tensor) -> torch.Tensor:
        """Configuration n of every tile of a valid mask, [T] int64; ValueError on the first invalid tile."""
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be bool, got {mask.dtype}")
        t = self.tiles(mask)
        n, ok = self._configs_of(t)
        ok &= torch.isin(n, torch.tensor(self.configs, device=n.device))
        if not bool(ok.all()):
            bad = int((~ok).nonzero()[0, 0])
            tiles_per_row = mask.shape[1] // self.tile[1]
            r0, c0 = (bad // tiles_per_row) * self.tile[0], (bad % tiles_per_row) * self.tile[1]
            raise ValueError(
                f"mask violates {self.name} at tile {bad} (rows {r0}..{r0 + self.tile[0] - 1}, "
                f"columns {c0}..{c0 + self.tile[1] - 1}): {self._explain(t[bad])}"
            )
        return n

    def validate(self, mask: torch.Tensor) -> None:
        self.tile_configs(mask)

    def tile_density(self, mask: torch.Tensor) -> torch.Tensor:
        """Kept fraction of every tile, [T] float (the mask need not be valid)."""
        return self.tiles(mask).flatten(1).float().mean(1)

    def select(self, mags: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """Within-tile selection: for tiles of magnitudes [T, th, tw] and configurations n [T],
        the bool mask [T, th, tw] keeping the best layout of each tile's configuration."""
        raise NotImplementedError

    # subclass hooks
    def _configs_of(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _explain(self, tile: torch.Tensor) -> str:
        return f"kept layout {tile.int().tolist()}"

    def __repr__(self) -> str:
        return self.name


def _check_configs(configs: tuple[int, ...], hi: int, what: str) -> tuple[int, ...]:
    if isinstance(configs, (str, bytes)) or not hasattr(configs, "__iter__"):
        raise TypeError(f"{what} configs must be a sequence of ints, got {configs!r}")
    cs = tuple(sorted(set(check_int(f"{what} configs entry", c) for c in configs)))
    if not cs or cs[0] < 0 or cs[-1] > hi:
        raise ValueError(f"{what} configurations must lie in 0..{hi}, got {configs}")
    return cs


def _rank_select(scores: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Keep the n best entries along the last dim; ties go to the lower index (same rule as the
    Triton kernels: rank = #greater + #equal-before)."""
    a = scores.unsqueeze(-1)  # [..., k, 1]: candidate
    b = scores.unsqueeze(-2)  # [..., 1, k']: others
    k = scores.shape[-1]
    before = torch.ones(k, k, dtype=torch.bool, device=scores.device).tril(-1)  # [k, k']: k' < k
    rank = (b > a).sum(-1) + ((b == a) & before).sum(-1)
    return rank < n.reshape(*n.shape, *([1] * (scores.dim() - n.dim())))


@functools.cache
def regular_patterns(x: int, n: int) -> torch.Tensor:
    """All x-by-x 0/1 matrices with every row and column sum n, [P, x, x] bool (x <= 4 only)."""
    if x > 4:
        raise ValueError("enumeration is for x <= 4 (x=4: 1, 24, 90, 24, 1 patterns)")
    rows = [r for r in itertools.product((0, 1), repeat=x) if sum(r) == n]
    out = [torch.tensor(c, dtype=torch.bool) for c in itertools.product(rows, repeat=x)]
    out = [m for m in out if bool((m.sum(0) == n).all())]
    return torch.stack(out)


@functools.cache
def _regular_table(x: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """All regular layouts of every configuration on ``device`` (built once per device)."""
    table = torch.cat([regular_patterns(x, k) for k in range(x + 1)]).to(device)
    return table, table.flatten(1).sum(1) // x


@dataclass(frozen=True, repr=False)
class TBS(Pattern):
    """Transposable block-wise sparsity: x-by-x tiles, n kept per row and per column."""

    x: int
    configs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_int("TBS tile size x", self.x, lo=1)
        object.__setattr__(self, "configs", _check_configs(self.configs or tuple(range(self.x + 1)), self.x, "TBS"))
        object.__setattr__(self, "tile", (self.x, self.x))
        object.__setattr__(self, "unit", self.x)

    @property
    def name(self) -> str:
        return f"TBS({self.x},{self.x})"

    def _configs_of(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rs, cs = t.sum(2), t.sum(1)
        n = rs[:, 0]
        ok = (rs == n[:, None]).all(1) & (cs == n[:, None]).all(1)
        return n, ok

    def _explain(self, tile: torch.Tensor) -> str:
        return f"row sums {tile.sum(1).tolist()}, column sums {tile.sum(0).tolist()} (must all equal one n)"

    def select(self, mags: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        if self.x <= 4:
            return self._select_exact_small(mags, n)
        return tbs_select_swaps(mags, n)

    def select_circulant(self, mags: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """The former heuristic for x >= 5 (kept to report its gap): the n best wrapped diagonals."""
        return tbs_select_circulant(mags, n)

    def _select_exact_small(self, mags: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """Exact: score every regular pattern of every configuration, best of the tile's n."""
        table, sizes = _regular_table(self.x, mags.device)  # [P, x, x], configuration of each
        dt = torch.float64 if mags.device.type == "cpu" else torch.float32  # exact tests / GPU speed
        scores = mags.flatten(1).to(dt) @ table.flatten(1).to(dt).T  # [T, P]
        scores = scores.masked_fill(sizes[None, :] != n[:, None], -torch.inf)
        return table[scores.argmax(1)]


# Row-pair swap sweeps of the TBS(x >= 5) selection. Retained |w| against the LP optimum (mean
# per configuration n, |N(0,1)| tiles and tiles with row and column scales, x = 8 and 16;
# tests/kernels/test_tbs_select.py): the two starts alone 76-87%, one sweep 98.1-99.1% (worst n 93-98%),
# two sweeps 99.3-99.8% (worst n >= 97.1%), three 99.5-99.9%; the wrapped diagonals alone (the
# former rule) 75-85%. The sweeps are the fused kernel's cost: on an H100, TBS(8) on a 13824x5120
# bf16 weight takes 0.080 / 0.461 / 0.959 / 1.352 ms at 0 / 1 / 2 / 3 sweeps (88% / 15% / 7% / 5%
# of the copy bandwidth; the wrapped diagonals alone took 0.072 ms), since every round compares
# every entry a few times in both starts (scripts/probes/gpu_probe_tbs_select.py). Two sweeps: the
# quality the tests require. A constexpr of the kernel (one compiled variant per value).
SWEEPS = 2


def _perm_columns(x: int, anti: bool, device: torch.device) -> torch.Tensor:
    """[i, s] -> column of permutation s at row i: wrapped diagonals (i + s) mod x, or
    anti-diagonals (s - i) mod x. Each family covers every entry once, so any n of its x
    permutations form an n-regular layout."""
    i = torch.arange(x, device=device)
    return ((i[None, :] - i[:, None]) if anti else (i[:, None] + i[None, :])) % x


def _permutation_start(t: torch.Tensor, n: torch.Tensor, anti: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The n best permutations of one family (ties to the lower s): layout [T, x, x] and its
    retained sum [T]. Scores are summed row by row (i = 0, 1, ...) and the retained sum over the
    kept s in order, in float32: the fused kernel's order at x = 8, so both take the same
    decisions (at x = 16 the kernel sums each permutation's two 8-column halves apart and then
    adds them: the same decisions except at float near-ties of two scores)."""
    nt, x = t.shape[0], t.shape[-1]
    cols = _perm_columns(x, anti, t.device).expand(nt, x, x)
    along = t.gather(2, cols)  # [T, i, s]
    score = along[:, 0]
    for i in range(1, x):
        score = score + along[:, i]
    keep = _rank_select(score, n)  # [T, s]
    layout = torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    layout.scatter_(2, cols, keep[:, None, :].expand(-1, x, -1))
    total = torch.zeros(nt, dtype=torch.float32, device=t.device)
    for s in range(x):
        total = total + torch.where(keep[:, s], score[:, s], 0.0)
    return layout, total


def _swap_sweeps(t: torch.Tensor, layout: torch.Tensor, total: torch.Tensor, sweeps: int) -> None:
    """Improve n-regular layouts [T, x, x] in place by row-pair swaps; ``total`` follows.

    A sweep is rounds r = 1 .. 2^ceil(log2 x) - 1; round r pairs row i with row p = i XOR r (a
    perfect matching, so all pairs move at once; for x not a power of two, rows whose partner
    does not exist sit the round out). Row i may hand a column j it keeps and p lacks to p, gaining
    t[p, j] - t[i, j]; best_i = the largest such gain (lowest j on ties; -inf if none) and
    likewise best_p. If best_i + best_p > 0 both columns move: every row and column count stays,
    and the retained sum grows by that gain (added to ``total`` pair by pair, lower row first).
    All in float32, the very operations of the fused kernel."""
    x = t.shape[-1]
    rows = torch.arange(x, device=t.device)
    cols = torch.arange(x, device=t.device)
    for _ in range(sweeps):
        for r in range(1, 1 << (x - 1).bit_length()):
            p = rows ^ r
            p = torch.where(p < x, p, rows)  # no partner: paired with itself, nothing to move
            cand = layout & ~layout[:, p, :]
            gain_j = (t[:, p, :] - t).masked_fill(~cand, -torch.inf)
            best, j = gain_j.max(2)  # first index of the maximum: ties to the lowest j
            gain = best + best[:, p]
            move = gain > 0
            flip = (cols == j[..., None]) | (cols == j[:, p, None])
            layout ^= flip & move[..., None]
            for i in range(x):
                if x > i ^ r > i:
                    total += torch.where(move[:, i], gain[:, i], 0.0)


def tbs_select_swaps(mags: torch.Tensor, n: torch.Tensor, sweeps: int = SWEEPS) -> torch.Tensor:
    """TBS(x) selection for x >= 5 (tiles [T, x, x], configurations [T]): the maximum retained
    |w| n-regular layout is a transportation LP (``kernels.ops.tbs_exact``), too slow per tile, so:

    1. two starts, the n best wrapped diagonals {(i, (i + s) mod x)} and the n best
       anti-diagonals {(i, (s - i) mod x)} (scored by their |w| sums, ties to the lower s);
    2. ``sweeps`` sweeps of row-pair swaps on each (``_swap_sweeps``);
    3. the start with the larger retained sum (tracked as its permutation scores plus the gains
       of its moves; ties: the diagonal start).

    The wrapped diagonals alone (``tbs_select_circulant``, the former rule) keep 75-85% of the
    optimum on average; this keeps 99.3-99.8% (``SWEEPS``). Vectorised over tiles (loops over
    sweeps, rounds and pairs only); computed in float32 in the fused kernel's order of operations
    (``kernels/ops/_flex_triton.py``), so both give the same masks (see ``_permutation_start`` for
    x = 16)."""
    t = mags.float()
    best_layout, best_total = None, None
    for anti in (False, True):
        layout, total = _permutation_start(t, n, anti)
        _swap_sweeps(t, layout, total, sweeps)
        if best_layout is None:
            best_layout, best_total = layout, total
        else:
            better = total > best_total
            best_layout = torch.where(better[:, None, None], layout, best_layout)
    return best_layout


def tbs_select_circulant(mags: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """The former TBS(x >= 5) heuristic: keep the n best of the x wrapped diagonals
    {(i, (i + s) mod x)} (any n of them form an n-regular layout). Keeps 75-85% of the optimum's
    |w| on average on |N(0, 1)| tiles at x = 8, 16; kept for the suites' gap row."""
    return _permutation_start(mags.float(), n, anti=False)[0]


@dataclass(frozen=True, repr=False)
class Vegeta(Pattern):
    """Row-wise flexible n:m on (1, tile_len) tiles: every group of m in a tile keeps the same n."""

    m: int
    tile_len: int = 0
    configs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_int("Vegeta pruning unit m", self.m, lo=1)
        check_int("Vegeta tile_len (0: the default 16 * m)", self.tile_len, lo=0)
        tl = self.tile_len or 16 * self.m
        if tl % self.m:
            raise ValueError(f"Vegeta tile_len {tl} is not divisible by the pruning unit m={self.m}")
        default = (0, max(1, self.m // 4), max(1, self.m // 2), self.m)
        object.__setattr__(self, "tile_len", tl)
        object.__setattr__(self, "configs", _check_configs(self.configs or default, self.m, "Vegeta"))
        object.__setattr__(self, "tile", (1, tl))
        object.__setattr__(self, "unit", tl // self.m)

    @property
    def name(self) -> str:
        return f"Vegeta({self.m})"

    def _groups(self, t: torch.Tensor) -> torch.Tensor:
        return t.reshape(t.shape[0], self.tile_len // self.m, self.m)

    def _configs_of(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = self._groups(t).sum(2)
        n = g[:, 0]
        return n, (g == n[:, None]).all(1)

    def _explain(self, tile: torch.Tensor) -> str:
        return f"kept per group of {self.m}: {self._groups(tile[None]).sum(2)[0].tolist()} (must all equal one n)"

    def select(self, mags: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        g = self._groups(mags)
        return _rank_select(g, n[:, None]).reshape(mags.shape)


@dataclass(frozen=True, repr=False)
class NM(Pattern):
    """Fixed n:m sparsity along rows (groups of m consecutive entries keep exactly n)."""

    n: int
    m: int

    def __post_init__(self) -> None:
        check_int("NM n", self.n)
        check_int("NM m", self.m)
        if not 0 <= self.n <= self.m or self.m < 1:
            raise ValueError(f"NM needs ints 0 <= n <= m, m >= 1; got n={self.n!r}, m={self.m!r}")
        object.__setattr__(self, "configs", (self.n,))
        object.__setattr__(self, "tile", (1, self.m))
        object.__setattr__(self, "unit", 1)

    @property
    def name(self) -> str:
        return f"{self.n}:{self.m}"

    def _configs_of(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = t.flatten(1).sum(1)
        return n, torch.ones_like(n, dtype=torch.bool)

    def select(self, mags: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return _rank_select(mags, n[:, None])


@dataclass(frozen=True, repr=False)
class Unstructured(Pattern):
    """No structure: every entry is its own tile."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", (0, 1))
        object.__setattr__(self, "tile", (1, 1))
        object.__setattr__(self, "unit", 1)

    @property
    def name(self) -> str:
        return "unstructured"

    def _configs_of(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = t.flatten(1).sum(1)
        return n, torch.ones_like(n, dtype=torch.bool)

    def select(self, mags: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return (n > 0).reshape(-1, 1, 1).expand_as(mags).clone()


def parse_pattern(spec: str) -> Pattern:
    """'TBS(4)', 'TBS(8,8)', 'Vegeta(4)', '2:4', 'unstructured' -> Pattern."""
    s = spec.replace(" ", "")
    low = s.lower()
    if low.startswith("tbs(") and s.endswith(")"):
        parts = [int(p) for p in s[4:-1].split(",")]
        if len(parts) > 2:  # 'TBS(4,4,5)' parsed as TBS(4) before
            raise ValueError(f"TBS takes one or two sizes, TBS(x) or TBS(x,x), got {spec!r}")
        if len(parts) == 2 and parts[0] != parts[1]:
            raise ValueError(f"TBS tiles are square, got {spec!r}")
        return TBS(parts[0])
    if low.startswith("vegeta(") and s.endswith(")"):
        return Vegeta(int(s[7:-1]))
    if ":" in s:
        n, m = s.split(":")
        return NM(int(n), int(m))
    if low in ("unstructured", "us"):
        return Unstructured()
    raise ValueError(f"unknown pattern {spec!r}; e.g. TBS(4), TBS(8,8), Vegeta(4), 2:4, unstructured")
