"""Transposable 2:4 masks: every 4x4 tile keeps exactly 2 entries per row and per column, so
the mask and its transpose are both 2:4 (forward and backward GEMMs share one sparse weight).

Three implementations of one problem, maximise sum(|W| * M) over transposable masks M:
- ``transposable_mask_reference``: plain PyTorch, scores all 90 patterns with one matmul (the
  paper's "convolution") and takes the argmax; the ground truth of the tests;
- ``method="exhaustive"``: the Triton kernel of ``_transposable_triton.py`` (same optimum up to
  float32 rounding, one pass over W, see ``_gen_transposable`` for the search order; precision
  below);
- ``method="approx2"``: the greedy 2-approximation of Hubara et al. 2021 (visit the 16 entries of
  a tile in decreasing |w|, keep one while its row and column hold fewer than 2), vectorised
  over tiles in PyTorch. Greedy can stall below 8 entries; a stalled tile is completed by
  augmenting swaps, so the result is always a valid transposable mask.

Precision of the Triton ``exhaustive`` search. It scores patterns by float32 sums of |w| / 8 (the
power-of-two scale is exact for |w| >= 2**-123 and keeps every sum below float32's maximum, so
weights up to float32's maximum do not overflow). Each score passes through three float32
roundings (pair, row pair, both halves), so it is within a factor (1 +- g), g = 3 * 2**-24 /
(1 - 3 * 2**-24), of the exact sum, and the pattern chosen keeps at least (1 - g) / (1 + g) >
1 - 3.6e-7 of the tile's optimum (1 - 4e-7 counting the subnormal rounding of entries below
2**-123, in a tile whose max |w| is at least 2**-100). Rounding can therefore only decide between
patterns whose exact sums lie within 3.6e-7 of the optimum, except where an entry is itself that
small: a nonzero |w| <= 2**-18 x its tile's max (e.g. 1 beside 1e8, which float32 sums absorb)
could be dropped for nothing. With ``check_finite=True`` (default) the scan that refuses NaN/Inf
also finds those tiles, and the tiles whose max |w| is below 2**-100 (scaled into float32's
subnormal range), and rescores them in float64 as the reference does (their masks are the
reference's). ``check_finite=False`` skips the scan (no host sync): the bound above is then the
guarantee (tiles with max |w| < 2**-100 are decided at subnormal precision).
"""

from __future__ import annotations

import functools
import itertools

import torch
import triton
import triton.language as tl

from kernels.ops.common import FLOAT_DTYPES, check_divisible, check_int, check_tensor, use_triton


def _enumerate_patterns() -> torch.Tensor:
    rows = [c for c in itertools.product((0, 1), repeat=4) if sum(c) == 2]
    pats = []
    for combo in itertools.product(rows, repeat=4):
        m = torch.tensor(combo, dtype=torch.bool)
        if bool((m.sum(0) == 2).all()):
            pats.append(m)
    return torch.stack(pats)


TRANSPOSABLE_24_PATTERNS: torch.Tensor = _enumerate_patterns()
"""All 90 transposable 2:4 patterns of a 4x4 tile, shape [90, 4, 4], bool."""
assert TRANSPOSABLE_24_PATTERNS.shape == (90, 4, 4)

_METHODS = ("exhaustive", "approx2", "reference")


def _check(w: torch.Tensor, n: int, m: int, check_finite: bool = True) -> None:
    check_tensor("w", w, dtypes=FLOAT_DTYPES, ndim=2, finite=check_finite)
    for name, v in (("n", n), ("m", m)):  # 2.0 == 2 passed before
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if (n, m) != (2, 4):
        raise ValueError(f"transposable masks are implemented for n=2, m=4 only (got n={n}, m={m})")
    check_divisible("w.shape[0]", w.shape[0], 4, "4x4 tile size")
    check_divisible("w.shape[1]", w.shape[1], 4, "4x4 tile size")


def as_tiles(w: torch.Tensor) -> torch.Tensor:
    """[R, C] -> [R/4, C/4, 16] view-order tiles (row-major inside a tile)."""
    r, c = w.shape
    return w.reshape(r // 4, 4, c // 4, 4).permute(0, 2, 1, 3).reshape(r // 4, c // 4, 16)


def _untile(t: torch.Tensor, r: int, c: int) -> torch.Tensor:
    return t.reshape(r // 4, c // 4, 4, 4).permute(0, 2, 1, 3).reshape(r, c)


@functools.lru_cache(maxsize=16)
def _patterns_on(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The [90, 16] pattern table on ``device`` (cached: no host-to-device copy per call)."""
    return TRANSPOSABLE_24_PATTERNS.reshape(90, 16).to(device=device, dtype=dtype)


def tile_scores(w: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Score of each of the 90 patterns for each tile: [R/4, C/4, 90] (retained sum of |w|)."""
    pats = _patterns_on(w.device, dtype)
    return as_tiles(w.abs().to(dtype)) @ pats.T


def transposable_mask_reference(w: torch.Tensor, n: int = 2, m: int = 4, chunk_rows: int = 4096) -> torch.Tensor:
    """Optimal transposable mask by scoring all 90 patterns (float64 on CPU, float32 on GPU)."""
    _check(w, n, m)
    r, c = w.shape
    dtype = torch.float64 if w.device.type == "cpu" else torch.float32
    pats = _patterns_on(w.device, torch.bool)
    out = torch.empty(r, c, dtype=torch.bool, device=w.device)
    for r0 in range(0, r, chunk_rows):
        blk = w[r0 : r0 + chunk_rows]
        idx = tile_scores(blk, dtype).argmax(-1)
        out[r0 : r0 + chunk_rows] = _untile(pats[idx], blk.shape[0], c)
    return out


def transposable_mask_approx2(
    w: torch.Tensor, n: int = 2, m: int = 4, chunk_tiles: int = 1 << 22, check_finite: bool = True
) -> torch.Tensor:
    """Greedy 2-approximation (Hubara et al. 2021) on true 4x4 tiles, vectorised over tiles.

    Per tile: sort the 16 magnitudes, then 16 steps that each accept the next entry if its row
    and column hold fewer than 2. Counts and the kept set live in bit fields of one int32 per
    tile and the visiting order is stored step-major, so a step is a handful of coalesced
    elementwise ops over all tiles; no host syncs.
    """
    _check(w, n, m, check_finite)
    check_int("chunk_tiles", chunk_tiles, lo=1)
    r, c = w.shape
    tiles = as_tiles(w.abs()).reshape(-1, 16)
    out = torch.empty(tiles.shape, dtype=torch.bool, device=w.device)
    shifts = torch.arange(8, dtype=torch.uint8, device=w.device)
    for t0 in range(0, tiles.shape[0], chunk_tiles):
        blk = tiles[t0 : t0 + chunk_tiles]
        order = blk.argsort(dim=1, descending=True).to(torch.int32).t().contiguous()  # [16, T]
        rows2 = (order >> 2) << 1  # bit offset of the entry's row counter (2 bits per row)
        cols2 = (order & 3) << 1
        keep = torch.zeros(blk.shape[0], dtype=torch.int32, device=w.device)
        rcnt = torch.zeros_like(keep)
        ccnt = torch.zeros_like(keep)
        for k in range(16):
            rk, ck = rows2[k], cols2[k]
            oki = ((((rcnt >> rk) & 3) < 2) & (((ccnt >> ck) & 3) < 2)).to(torch.int32)
            keep |= oki << order[k]
            rcnt += oki << rk
            ccnt += oki << ck
        # unpack the low 16 bits: int16 -> 2 little-endian bytes -> 16 bools
        low = keep.to(torch.int16).view(torch.uint8).view(-1, 2, 1)
        bits = ((low >> shifts) & 1).bool().view(-1, 16)
        if blk.shape[0] < SUBSET_REPAIR_TILES:
            out[t0 : t0 + chunk_tiles] = _complete_stalled(blk, bits)  # no sync: capturable in a graph
        else:  # large: repair only the stalled tiles (about 16%), at the cost of one host sync
            ids = (rcnt != 0b10101010).nonzero().squeeze(1)  # a row counter below 2
            bits[ids] = _complete_stalled(blk[ids], bits[ids])
            out[t0 : t0 + chunk_tiles] = bits
    return _untile(out, r, c)


# Below this many tiles per chunk, stalled tiles are completed branch-free over all tiles (the
# call stays free of host syncs and launch-bound sizes can be timed from a CUDA graph); above it,
# only the stalled subset is completed, which costs one sync but far less device time.
SUBSET_REPAIR_TILES = 1 << 20


def _complete_stalled(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Complete the greedy tiles that stalled below 8 kept entries (about 16% of random tiles).

    Take the first row i and first column j holding fewer than 2. If (i, j) is free, keep it.
    Otherwise (i, j) is the only entry of row i and of column j, so every other kept (k, l) has
    k != i and l != j with (i, l) and (k, j) free: the swap drop (k, l), keep (i, l) and (k, j)
    adds one entry, and the best-scoring one is taken. Each round adds one entry to every
    incomplete tile and a greedy (maximal) set holds at least 4, so 4 rounds complete every tile.
    Branch-free over all tiles (no host sync), so the whole method can be captured in a CUDA graph.
    """
    ar = torch.arange(4, device=keep.device)
    s4 = scores.view(-1, 4, 4)
    for _ in range(4):
        k4 = keep.view(-1, 4, 4)
        row_short = k4.sum(2, dtype=torch.int8) < 2  # [T, 4]
        col_short = k4.sum(1, dtype=torch.int8) < 2
        todo = row_short.any(1, keepdim=True)  # [T, 1]
        i = row_short.to(torch.int8).argmax(1, keepdim=True)  # [T, 1] int64
        j = col_short.to(torch.int8).argmax(1, keepdim=True)
        row_i = k4.gather(1, i[:, :, None].expand(-1, 1, 4))  # [T, 1, 4]: kept (i, l)
        col_j = k4.gather(2, j[:, :, None].expand(-1, 4, 1))  # [T, 4, 1]: kept (k, j)
        valid = k4 & ~row_i & ~col_j & (ar[None, :, None] != i[:, :, None]) & (ar[None, None, :] != j[:, :, None])
        gain = s4.gather(1, i[:, :, None].expand(-1, 1, 4)) + s4.gather(2, j[:, :, None].expand(-1, 4, 1)) - s4
        best = torch.where(valid, gain, torch.full_like(gain, -torch.inf)).view(-1, 16).argmax(1, keepdim=True)
        ij = i * 4 + j
        direct = todo & ~keep.gather(1, ij)  # (i, j) free: keep it
        swap = todo & ~direct & valid.view(-1, 16).gather(1, best)
        keep = keep.clone()
        keep.scatter_(1, ij, keep.gather(1, ij) | direct)
        keep.scatter_(1, best, keep.gather(1, best) & ~swap)
        il, kj = i * 4 + best % 4, (best // 4) * 4 + j
        keep.scatter_(1, il, keep.gather(1, il) | swap)
        keep.scatter_(1, kj, keep.gather(1, kj) | swap)
    return keep


def exhaustive_triton(w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    from kernels.ops._transposable_triton import transposable24_kernel

    r, c = w.shape
    if w.stride(1) != 1:
        w = w.contiguous()
    if out is None:
        out = torch.empty(r, c, dtype=torch.bool, device=w.device)
    tr, tc, warps = _config(r, c, w.element_size())
    grid = (-(-(r // 4) // tr), -(-(c // 4) // tc))
    transposable24_kernel[grid](
        w, out.view(torch.int8), r // 4, c // 4, w.stride(0), out.stride(0), TR=tr, TC=tc, num_warps=warps
    )
    return out


def _config(r: int, c: int, elem: int) -> tuple[int, int, int]:
    """(tile rows, tile columns, warps) per program.

    From the H100 sweep in results/tuning/h100_sweep_1.csv (scripts/probes/gpu_sweep.py): one tile row
    of 128 tiles (512 columns) per program was best on average over the Table 2 shapes for both
    dtypes, with 2 warps for 16-bit and 4 warps for 32-bit weights. Narrow weights get a block
    no wider than their row.
    """
    tc = min(128, 1 << max(0, (c // 4 - 1).bit_length()))
    return 1, tc, 2 if elem == 2 else 4


# an entry of at most this fraction of its tile's max may be dropped by the float32 search (its
# loss bound is 3.6e-7 x the optimum <= 3.6e-7 x 8 x max = 2.9e-6 x max, below 2**-18 x max = 3.8e-6
# x max): such tiles are rescored in float64
_TINY_FRACTION = 2.0**-18
# tiles whose max |w| is below this are scaled (by 1/8) into float32's subnormal range
_TINY_TILE = 2.0**-100


@triton.jit
def _scan_kernel(w_ptr, flag_ptr, n_tile_cols, stride_w, tiny_fraction, tiny_tile, TC: tl.constexpr):
    """Per 4x4 tile: 2 if it holds NaN/Inf, else 1 if a nonzero |w| <= tiny_fraction x the tile's
    max or 0 < max < tiny_tile, else 0 (one int8 per tile, row-major)."""
    tr = tl.program_id(0).to(tl.int64)
    tc = tl.program_id(1) * TC + tl.arange(0, TC)
    cols = 4 * tc[:, None] + tl.arange(0, 4)[None, :]  # [TC, 4]
    inb = (tc < n_tile_cols)[:, None]
    row = w_ptr + 4 * tr * stride_w + cols
    x0 = tl.abs(tl.load(row, mask=inb, other=0.0).to(tl.float32))
    x1 = tl.abs(tl.load(row + stride_w, mask=inb, other=0.0).to(tl.float32))
    x2 = tl.abs(tl.load(row + 2 * stride_w, mask=inb, other=0.0).to(tl.float32))
    x3 = tl.abs(tl.load(row + 3 * stride_w, mask=inb, other=0.0).to(tl.float32))
    big = tl.maximum(tl.maximum(tl.max(x0, 1), tl.max(x1, 1)), tl.maximum(tl.max(x2, 1), tl.max(x3, 1)))
    thr = (big * tiny_fraction)[:, None]
    inf = float("inf")
    bad = tl.max(((x0 != x0) | (x0 == inf) | (x1 != x1) | (x1 == inf)).to(tl.int32), 1)
    bad = tl.maximum(bad, tl.max(((x2 != x2) | (x2 == inf) | (x3 != x3) | (x3 == inf)).to(tl.int32), 1))
    tiny = tl.max((((x0 > 0) & (x0 <= thr)) | ((x1 > 0) & (x1 <= thr))).to(tl.int32), 1)
    tiny = tl.maximum(tiny, tl.max((((x2 > 0) & (x2 <= thr)) | ((x3 > 0) & (x3 <= thr))).to(tl.int32), 1))
    tiny = tl.maximum(tiny, ((big > 0) & (big < tiny_tile)).to(tl.int32))
    flag = tl.where(bad > 0, 2, tiny)
    tl.store(flag_ptr + tr * n_tile_cols + tc, flag.to(tl.int8), mask=tc < n_tile_cols)


def _scan_for_exact(w: torch.Tensor) -> torch.Tensor | None:
    """The check pass of the Triton exhaustive path (one read of W, one int8 per tile, one host
    sync): refuse NaN/Inf (as ``check_finite`` does) and return the [T, 2] (tile row, tile column)
    indices of the tiles to rescore in float64 (see the module docstring), or None if none."""
    r, c = w.shape
    if w.numel() == 0:
        return None
    if w.stride(1) != 1:
        w = w.contiguous()
    flags = torch.empty(r // 4, c // 4, dtype=torch.int8, device=w.device)
    tc = min(128, 1 << max(0, (c // 4 - 1).bit_length()))
    grid = (r // 4, -(-(c // 4) // tc))
    _scan_kernel[grid](w, flags, c // 4, w.stride(0), _TINY_FRACTION, _TINY_TILE, TC=tc, num_warps=4)
    worst = int(flags.max())
    if worst == 2:
        raise ValueError("w contains NaN or Inf; refusing to compute on non-finite values")
    return (flags == 1).nonzero() if worst == 1 else None


def _rescore_float64(w: torch.Tensor, out: torch.Tensor, tiles: torch.Tensor) -> None:
    """Overwrite the masks of ``tiles`` ([T, 2] tile row and column) in ``out`` with the float64
    argmax over the 90 patterns (the reference's scoring and tie-breaking)."""
    r, c = w.shape
    ti, tj = tiles[:, 0], tiles[:, 1]
    blk = w.reshape(r // 4, 4, c // 4, 4)[ti, :, tj, :]  # [T, 4, 4]
    scores = blk.abs().to(torch.float64).reshape(-1, 16) @ _patterns_on(w.device, torch.float64).T
    best = _patterns_on(w.device, torch.bool)[scores.argmax(1)]
    out.view(r // 4, 4, c // 4, 4)[ti, :, tj, :] = best.view(-1, 4, 4)


def transposable_mask(
    w: torch.Tensor, n: int = 2, m: int = 4, method: str = "exhaustive", check_finite: bool = True
) -> torch.Tensor:
    """Transposable n:m mask of a 2-D weight (True = kept).

    ``exhaustive`` is optimal (scores all 90 patterns of each tile) and runs the Triton kernel on
    CUDA or under ``TRITON_INTERPRET=1``, else the PyTorch reference; ``approx2`` is Hubara et
    al.'s greedy 2-approximation; ``reference`` forces the PyTorch reference.

    ``check_finite=False`` skips the NaN/Inf scan of ``w`` (one extra read of W and a host sync);
    shape, dtype and device are always checked. Use it only on weights known to be finite.

    Precision of the Triton ``exhaustive`` path (see the module docstring): every tile keeps at
    least 1 - 4e-7 of its optimal sum of |w| (float32 scores, no overflow for any finite weight);
    with ``check_finite=True`` the tiles where float32 rounding could drop an entry for nothing
    (a nonzero |w| <= 2**-18 x the tile's max) or that are tiny (max |w| < 2**-100) are rescored
    in float64, exactly as the reference scores them.
    """
    if method not in _METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {_METHODS}")
    fused = method == "exhaustive" and isinstance(w, torch.Tensor) and use_triton(w)
    _check(w, n, m, check_finite and not fused)  # the fused path scans in _scan_for_exact
    if method == "approx2":
        return transposable_mask_approx2(w, n, m, check_finite=False)
    if fused:
        tiles = _scan_for_exact(w) if check_finite else None
        out = exhaustive_triton(w)
        if tiles is not None:
            _rescore_float64(w, out, tiles)
        return out
    return transposable_mask_reference(w, n, m)


def is_transposable_24(mask: torch.Tensor) -> bool:
    """True if every 4x4 tile of ``mask`` has exactly 2 kept entries per row and per column."""
    if mask.dim() != 2 or mask.shape[0] % 4 or mask.shape[1] % 4:
        return False
    t = as_tiles(mask.to(torch.int8)).reshape(-1, 4, 4)
    return bool((t.sum(1) == 2).all() and (t.sum(2) == 2).all())
