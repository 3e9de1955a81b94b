"""Transposable 2:4 masks: every 4x4 tile keeps exactly 2 entries per row and per column, so
the mask and its transpose are both 2:4 (forward and backward GEMMs share one sparse weight).

Three implementations of one problem, maximise sum(|W| * M) over transposable masks M:
- ``transposable_mask_reference``: plain PyTorch, scores all 90 patterns with one matmul (the
  paper's "convolution") and takes the argmax; the ground truth of the tests;
- ``method="exhaustive"``: the Triton kernel of ``_transposable_triton.py`` (same optimum, one
  pass over W, see ``_gen_transposable`` for the search order);
- ``method="approx2"``: the greedy 2-approximation of Hubara et al. 2021 (visit the 16 entries of
  a tile in decreasing |w|, keep one while its row and column hold fewer than 2), vectorised
  over tiles in PyTorch. Greedy can stall below 8 entries; a stalled tile is completed by
  augmenting swaps, so the result is always a valid transposable mask.
"""

from __future__ import annotations

import itertools

import torch

from kernels._common import FLOAT_DTYPES, check_divisible, check_tensor, use_triton


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


def _check(w: torch.Tensor, n: int, m: int) -> None:
    check_tensor("w", w, dtypes=FLOAT_DTYPES, ndim=2)
    if (n, m) != (2, 4):
        raise ValueError(f"transposable masks are implemented for n=2, m=4 only (got n={n}, m={m})")
    check_divisible("w.shape[0]", w.shape[0], 4, "4x4 tile size")
    check_divisible("w.shape[1]", w.shape[1], 4, "4x4 tile size")


def _tiles(w: torch.Tensor) -> torch.Tensor:
    """[R, C] -> [R/4, C/4, 16] view-order tiles (row-major inside a tile)."""
    r, c = w.shape
    return w.reshape(r // 4, 4, c // 4, 4).permute(0, 2, 1, 3).reshape(r // 4, c // 4, 16)


def _untile(t: torch.Tensor, r: int, c: int) -> torch.Tensor:
    return t.reshape(r // 4, c // 4, 4, 4).permute(0, 2, 1, 3).reshape(r, c)


def tile_scores(w: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Score of each of the 90 patterns for each tile: [R/4, C/4, 90] (retained sum of |w|)."""
    pats = TRANSPOSABLE_24_PATTERNS.reshape(90, 16).to(device=w.device, dtype=dtype)
    return _tiles(w.abs().to(dtype)) @ pats.T


def transposable_mask_reference(w: torch.Tensor, n: int = 2, m: int = 4, chunk_rows: int = 4096) -> torch.Tensor:
    """Optimal transposable mask by scoring all 90 patterns (float64 on CPU, float32 on GPU)."""
    _check(w, n, m)
    r, c = w.shape
    dtype = torch.float64 if w.device.type == "cpu" else torch.float32
    pats = TRANSPOSABLE_24_PATTERNS.reshape(90, 16).to(w.device)
    out = torch.empty(r, c, dtype=torch.bool, device=w.device)
    for r0 in range(0, r, chunk_rows):
        blk = w[r0 : r0 + chunk_rows]
        idx = tile_scores(blk, dtype).argmax(-1)
        out[r0 : r0 + chunk_rows] = _untile(pats[idx], blk.shape[0], c)
    return out


def transposable_mask_approx2(w: torch.Tensor, n: int = 2, m: int = 4, chunk_tiles: int = 1 << 22) -> torch.Tensor:
    """Greedy 2-approximation (Hubara et al. 2021) on true 4x4 tiles, vectorised over tiles."""
    _check(w, n, m)
    r, c = w.shape
    tiles = _tiles(w.abs()).reshape(-1, 16)
    out = torch.empty_like(tiles, dtype=torch.bool)
    ar = torch.arange(16, device=w.device)
    row_of = ar // 4
    col_of = ar % 4
    for t0 in range(0, tiles.shape[0], chunk_tiles):
        blk = tiles[t0 : t0 + chunk_tiles]
        order = blk.argsort(dim=1, descending=True)
        rows = row_of[order]
        cols = col_of[order]
        keep = torch.zeros_like(blk, dtype=torch.bool)
        rcount = torch.zeros(blk.shape[0], 4, dtype=torch.int8, device=w.device)
        ccount = torch.zeros_like(rcount)
        for k in range(16):
            rk = rows[:, k : k + 1]
            ck = cols[:, k : k + 1]
            ok = (rcount.gather(1, rk) < 2) & (ccount.gather(1, ck) < 2)
            keep.scatter_(1, order[:, k : k + 1], ok)
            inc = ok.to(torch.int8)
            rcount.scatter_add_(1, rk, inc)
            ccount.scatter_add_(1, ck, inc)
        _repair(blk, keep)
        out[t0 : t0 + chunk_tiles] = keep
    return _untile(out, r, c)


def _repair(scores: torch.Tensor, keep: torch.Tensor) -> None:
    """Complete greedy tiles that stalled below 8 entries, in place, by augmenting swaps.

    A stalled tile has a row i and a column j with fewer than 2 entries (and (i, j) already kept).
    Swap: drop a kept (k, l) with k != i, l != j, and keep (i, l) and (k, j) if both are free; each
    swap adds one entry. The best-scoring swap is taken. Any tile still incomplete after that
    (never seen on data; guarded anyway) gets the exact optimum.
    """
    for _ in range(4):
        k4 = keep.view(-1, 4, 4)
        bad = (k4.sum(2) < 2).any(1)
        if not bool(bad.any()):
            return
        ids = bad.nonzero().squeeze(1)
        kb = k4[ids]
        sb = scores[ids].view(-1, 4, 4)
        i = (kb.sum(2) < 2).to(torch.int8).argmax(1)
        j = (kb.sum(1) < 2).to(torch.int8).argmax(1)
        best = torch.full((len(ids),), -1.0, dtype=sb.dtype, device=keep.device)
        choice = torch.zeros(len(ids), 2, dtype=torch.long, device=keep.device)
        n = torch.arange(len(ids), device=keep.device)
        for kk in range(4):
            for ll in range(4):
                kt = torch.full_like(i, kk, dtype=torch.long)
                lt = torch.full_like(i, ll, dtype=torch.long)
                valid = (kt != i) & (lt != j) & kb[n, kt, lt] & ~kb[n, i.long(), lt] & ~kb[n, kt, j.long()]
                gain = sb[n, i.long(), lt] + sb[n, kt, j.long()] - sb[n, kt, lt]
                take = valid & (gain > best)
                best = torch.where(take, gain, best)
                choice[take] = torch.tensor([kk, ll], device=keep.device)
        ok = best >= 0
        kk, ll = choice[:, 0], choice[:, 1]
        il, jl = i.long(), j.long()
        kb[n[ok], kk[ok], ll[ok]] = False
        kb[n[ok], il[ok], ll[ok]] = True
        kb[n[ok], kk[ok], jl[ok]] = True
        k4[ids] = kb
    k4 = keep.view(-1, 4, 4)
    bad = ((k4.sum(2) != 2).any(1) | (k4.sum(1) != 2).any(1)).nonzero().squeeze(1)
    if len(bad):
        pats = TRANSPOSABLE_24_PATTERNS.reshape(90, 16).to(keep.device)
        idx = (scores[bad].double() @ pats.double().T).argmax(-1)
        keep[bad] = pats[idx]


def _exhaustive_triton(w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    from kernels._transposable_triton import transposable24_kernel

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
    """Tile-block shape (tile rows, tile cols) and warps per program.

    Chosen by a sweep on an H100 (scripts/gpu_campaign.py): wide in columns for coalesced rows,
    a few tile rows for independent loads in flight; small problems get small blocks so that
    every multiprocessor has work.
    """
    tc = 64 if c >= 256 else max(1, 1 << max(0, (c // 4 - 1).bit_length()))
    tr = 4
    return tr, min(tc, 64), 4


def transposable_mask(w: torch.Tensor, n: int = 2, m: int = 4, method: str = "exhaustive") -> torch.Tensor:
    """Transposable n:m mask of a 2-D weight (True = kept).

    ``exhaustive`` is optimal (scores all 90 patterns of each tile) and runs the Triton kernel on
    CUDA or under ``TRITON_INTERPRET=1``, else the PyTorch reference; ``approx2`` is Hubara et
    al.'s greedy 2-approximation; ``reference`` forces the PyTorch reference.
    """
    if method not in _METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {_METHODS}")
    _check(w, n, m)
    if method == "approx2":
        return transposable_mask_approx2(w, n, m)
    if method == "exhaustive" and use_triton(w):
        return _exhaustive_triton(w)
    return transposable_mask_reference(w, n, m)


def is_transposable_24(mask: torch.Tensor) -> bool:
    """True if every 4x4 tile of ``mask`` has exactly 2 kept entries per row and per column."""
    if mask.dim() != 2 or mask.shape[0] % 4 or mask.shape[1] % 4:
        return False
    t = _tiles(mask.to(torch.int8)).reshape(-1, 4, 4)
    return bool((t.sum(1) == 2).all() and (t.sum(2) == 2).all())
