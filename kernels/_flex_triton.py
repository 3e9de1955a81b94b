"""Triton kernels of FAST's fused mask generation (``flex_mask(method="fast")``).

One pass over the weight per pattern family: load a block of tiles, count |w| > pivot and
|w| == pivot per tile (ties weighted by the tie share), draw u = Philox(seed, tile)
(``tl.rand``), choose the configuration by the same float32 expression as the reference
(``kernels.flex.choose_configs``), select within the tile, write the byte mask.

Tiles to threads or blocks, by size: a program (thread block) takes one tile row and as many
tiles along it as fill a fixed element budget (``GROUPS_ELEMS`` / ``CIRCULANT_ELEMS``, tuned per
family). Inside it, a group of m <= 8 entries sits in one thread's registers (the last, contiguous
axis), so ranking within a group never leaves the thread; a Vegeta tile of 16 groups is spread
over threads of the block and reduced across them; a TBS(x >= 8) tile sits in x / 8 threads (all
x rows, 8 columns each); a block holds many small tiles or a few large ones, never a fraction of one.

- TBS(4,4): ``_flex_tbs4_triton.py`` (generated; exact selection for every n).
- TBS(8,8), TBS(16,16): ``_flex_tbs_kernel``, the selection of ``kernels.patterns.tbs_select_swaps``
  (the n best wrapped diagonals and the n best anti-diagonals, each improved by SWEEPS sweeps of
  row-pair swaps, the better kept), bit-identical to the reference at x = 8.
- Vegeta(m) and n:m: top-n per group of m by rank (ties to the lower index).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._common import triton_interpret
from kernels.patterns import NM, SWEEPS, TBS, Pattern, Vegeta


@triton.jit
def _set(tup, i: tl.constexpr, v):
    """``tup`` with entry ``i`` replaced by ``v`` (tuples are the kernel's arrays of rows)."""
    return tup[:i] + (v,) + tup[i + 1 :]


@triton.jit
def _advance(ptrs, step, N: tl.constexpr):
    """Every pointer tensor of a tuple moved by ``step`` elements."""
    out = ()
    for i in tl.static_range(N):
        out = out + (ptrs[i] + step,)
    return out


@triton.jit
def _unstack(x, N: tl.constexpr):
    """A tensor whose last b axes (of 2 each) index N = 2^b entries in row-major order -> the
    tuple of its N slices (``tl.split`` level by level)."""
    parts = (x,)
    for level in tl.static_range(N.bit_length() - 1):
        lo = ()
        hi = ()
        for m in tl.static_range(1 << level):  # parts[m]: the entries whose low ``level`` bits are m
            a, b = tl.split(parts[m])  # the next bit
            lo = lo + (a,)
            hi = hi + (b,)
        parts = lo + hi
    return parts


@triton.jit
def _permutation_start(t, n, hh, X: tl.constexpr, L: tl.constexpr, ANTI: tl.constexpr):
    """Rows (local 8-column bitmasks, [TC, H] each) of the n best permutations of one family,
    and their retained sum [TC]: permutation s holds column (i + s) mod X of row i (wrapped
    diagonals) or (s - i) mod X (anti-diagonals, ``ANTI``); scores summed row by row."""
    H: tl.constexpr = X // L
    score = ()
    for s in tl.static_range(X):
        acc = tl.zeros_like(t[0][0])
        for i in tl.static_range(X):  # column c = (s - i) mod X or (i + s) mod X, in lane c // L
            v = t[i][(((s - i) if ANTI else (i + s)) % X) % L]
            if H > 1:
                v = tl.where(hh == (((s - i) if ANTI else (i + s)) % X) // L, v, 0.0)
            acc = acc + v
        score = score + (tl.sum(acc, axis=1),)
    # rank of s: #greater + #equal with a lower index (the reference's _rank_select)
    rank = ()
    for _s in tl.static_range(X):
        rank = rank + (tl.zeros_like(n),)
    for s in tl.static_range(X):
        for q in tl.static_range(s + 1, X):
            beats = (score[q] > score[s]).to(tl.int32)  # q beats s; else s beats q (ties to s < q)
            rank = _set(rank, s, rank[s] + beats)
            rank = _set(rank, q, rank[q] + 1 - beats)
    kept = tl.zeros_like(n)
    total = tl.zeros_like(score[0])
    for s in tl.static_range(X):
        keep = rank[s] < n
        kept = kept | (keep.to(tl.int32) << s)
        total = total + tl.where(keep, score[s], 0.0)
    rows = ()
    full: tl.constexpr = (1 << X) - 1
    for i in tl.static_range(X):
        # column c of row i is on diagonal (c - i) mod X (rotate left by i), on anti-diagonal
        # (c + i) mod X (rotate right by i, i.e. left by X - i)
        if ANTI:  # noqa: SIM108 (a constexpr branch; shift amounts stay constants)
            bits = ((kept << ((X - i) % X)) | (kept >> (X - (X - i) % X))) & full
        else:
            bits = ((kept << i) | (kept >> (X - i))) & full
        rows = rows + (((bits[:, None] >> (L * hh)) & ((1 << L) - 1)),)
    return rows, total


@triton.jit
def _best_swap(d, ki, kp, hh, L: tl.constexpr, H: tl.constexpr):
    """For a row pair (i, p) with d[j] = t[p, j] - t[i, j] (this lane's 8 columns): the largest
    d over a = K_i & ~K_p and the smallest over b = K_p & ~K_i, each with its column (lowest on
    ties; -inf / +inf if empty). Returns (gain, column i gives, column p gives), per tile."""
    a = ki & ~kp
    b = kp & ~ki
    hi = tl.full(ki.shape, float("-inf"), tl.float32)
    lo = tl.full(ki.shape, float("inf"), tl.float32)
    ja = tl.zeros_like(ki)
    jb = tl.zeros_like(ki)
    for j in tl.static_range(L):
        ta = ((a & (1 << j)) != 0) & (d[j] > hi)
        hi = tl.where(ta, d[j], hi)
        ja = tl.where(ta, j, ja)
        tb = ((b & (1 << j)) != 0) & (d[j] < lo)
        lo = tl.where(tb, d[j], lo)
        jb = tl.where(tb, j, jb)
    # across the H lanes of a tile: the extreme, and the lowest column reaching it (plain max/min
    # reductions: the interpreter runs a custom combine function element by element)
    top = tl.max(hi, axis=1)
    bottom = tl.min(lo, axis=1)
    if H > 1:
        ja = tl.where(hi == top[:, None], ja + L * hh, L * H)
        jb = tl.where(lo == bottom[:, None], jb + L * hh, L * H)
    return top - bottom, tl.min(ja, axis=1), tl.min(jb, axis=1)


@triton.jit
def _swap_round(t, k, total, hh, r: tl.constexpr, X: tl.constexpr, L: tl.constexpr):
    """One round of row-pair swaps (rows i and i XOR r) on one start's rows ``k``."""
    H: tl.constexpr = X // L
    for i in tl.static_range(X):
        if i < (i ^ r):  # the pair (i, p = i XOR r)
            d = ()
            for j in tl.static_range(L):
                d = d + (t[i ^ r][j] - t[i][j],)
            gain, ja, jb = _best_swap(d, k[i], k[i ^ r], hh, L, H)
            move = gain > 0
            ga = tl.where((hh == (ja // L)[:, None]), 1 << (ja % L)[:, None], 0)
            gb = tl.where((hh == (jb // L)[:, None]), 1 << (jb % L)[:, None], 0)
            flip = tl.where(move[:, None], ga | gb, 0)
            k = _set(k, i, k[i] ^ flip)
            k = _set(k, i ^ r, k[i ^ r] ^ flip)
            total = total + tl.where(move, gain, 0.0)
    return k, total


@triton.jit(do_not_specialize=["seed"])
def _flex_tbs_kernel(
    w_ptr,
    m_ptr,
    pivot,
    tie,
    seed,
    n_tile_cols,
    n_tiles,
    stride_w,
    stride_m,
    X: tl.constexpr,
    TC: tl.constexpr,
    SWEEPS: tl.constexpr,
    PIVOT_PTR: tl.constexpr = False,
):
    """TBS(X) for X = 8, 16: count vs pivot, Philox draw of n per tile, then the selection of
    ``kernels.patterns.tbs_select_swaps`` (two permutation starts, SWEEPS sweeps of row-pair
    swaps, the better start). A program takes TC consecutive tiles in row-major tile order. A
    tile's X rows are X tuples of 8 tensors [TC, H] (one per column; H = X / 8 neighbouring
    lanes hold 8 columns each), so a tile sits in H threads' registers, a row pair's work is
    elementwise, and only the per-pair maxima cross lanes (for X = 16)."""
    L: tl.constexpr = 8 if X == 8 else 4  # columns per lane: 8 X entries per thread, 16 rows x 4 at X = 16
    H: tl.constexpr = X // L
    if PIVOT_PTR:  # ``pivot`` points at the device state (pivot, tie share); ``tie`` is unused
        tie = tl.load(pivot + 1)
        pivot = tl.load(pivot)
    tile = tl.program_id(0) * TC + tl.arange(0, TC)
    hh = tl.arange(0, H)[None, :]
    # lanes: tile-major, then column group; each reads [8] contiguous entries of every row
    lane = tl.program_id(0) * (TC * H) + tl.arange(0, TC * H)
    tr = lane // H // n_tile_cols
    wcol = X * (lane // H - tr * n_tile_cols) + L * (lane % H)
    inb = (lane // H < n_tiles)[:, None]
    jl = tl.arange(0, L)[None, :]
    row0 = (X * tr).to(tl.int64)
    gt = tl.zeros([TC * H], dtype=tl.int32)
    eq = tl.zeros([TC * H], dtype=tl.int32)
    # The loads (and stores) sit in a one-pass loop whose trip count Triton cannot fold, each
    # through its own loop-carried pointer: Triton's coalescing pass walks, for a load or store
    # whose pointer an op defines, the whole computation connected to it (quadratic in its size:
    # minutes of compilation); for a pointer that is a loop argument it does not.
    once = tl.minimum(n_tile_cols, 1)
    zero = tl.zeros([TC, H], dtype=tl.float32)
    zeros = ()
    for _j in tl.static_range(L):
        zeros = zeros + (zero,)
    t = ()  # t[i][j]: |w| of row i, column L h + j of each tile (lane h), [TC, H] float32
    wp = ()
    for i in tl.static_range(X):
        t = t + (zeros,)
        wp = wp + (w_ptr + ((row0 + i) * stride_w + wcol)[:, None] + jl,)
    for _ in range(once):
        t = ()
        for i in tl.static_range(X):
            x = tl.abs(tl.load(wp[i], mask=inb, other=0.0).to(tl.float32))
            gt += tl.sum((x > pivot).to(tl.int32), axis=1)
            eq += tl.sum((x == pivot).to(tl.int32), axis=1)
            if L == 8:
                t = t + (_unstack(tl.reshape(x, (TC, H, 2, 2, 2)), L),)
            else:
                t = t + (_unstack(tl.reshape(x, (TC, H, 2, 2)), L),)
        wp = _advance(wp, X * stride_w, X)
    gt = tl.sum(tl.reshape(gt, (TC, H)), axis=1)
    eq = tl.sum(tl.reshape(eq, (TC, H)), axis=1)
    c = gt.to(tl.float32) + eq.to(tl.float32) * tie  # wanted entries, ties shared
    lo = tl.floor(c / X)
    u = tl.rand(seed, tile)
    n = (lo + ((u * X) < (c - X * lo)).to(tl.float32)).to(tl.int32)
    # the two starts one after the other (fewer live registers than interleaved)
    keep, best = _permutation_start(t, n, hh, X, L, False)
    for _ in range(SWEEPS):
        for r in tl.static_range(1, X):
            keep, best = _swap_round(t, keep, best, hh, r, X, L)
    ka, total = _permutation_start(t, n, hh, X, L, True)
    for _ in range(SWEEPS):
        for r in tl.static_range(1, X):
            ka, total = _swap_round(t, ka, total, hh, r, X, L)
    anti = (total > best)[:, None]  # ties: the diagonal start
    mp = ()
    for i in tl.static_range(X):
        keep = _set(keep, i, tl.where(anti, ka[i], keep[i]))
        mp = mp + (m_ptr + ((row0 + i) * stride_m + wcol)[:, None] + jl,)
    for _ in range(once):
        for i in tl.static_range(X):
            y = tl.reshape((keep[i][:, :, None] >> tl.arange(0, L)[None, None, :]) & 1, (TC * H, L))
            tl.store(mp[i], y.to(tl.int8), mask=inb)
        mp = _advance(mp, X * stride_m, X)


@triton.jit(do_not_specialize=["seed"])
def _flex_groups_kernel(
    w_ptr,
    m_ptr,
    pivot,
    tie,
    seed,
    n_tile_cols,
    stride_w,
    stride_m,
    G: tl.constexpr,
    M: tl.constexpr,
    TT: tl.constexpr,
    C1: tl.constexpr,
    C2: tl.constexpr,
    FIXED_N: tl.constexpr,
    PIVOT_PTR: tl.constexpr = False,
):
    # one row, TT tiles of G groups of M entries; configurations {0, C1, C2, M} or FIXED_N.
    # One contiguous [TT, G, M] load and store; the rank of entry e inside its group is counted
    # against the group's M entries along the last axis (held by one thread: no layout shuffles).
    r = tl.program_id(0).to(tl.int64)
    t = tl.program_id(1) * TT + tl.arange(0, TT)
    g = tl.arange(0, G)
    ev = tl.arange(0, M)
    col = (G * M) * t[:, None, None] + M * g[None, :, None] + ev[None, None, :]
    inb = (t < n_tile_cols)[:, None, None]
    x = tl.abs(tl.load(w_ptr + r * stride_w + col, mask=inb, other=0.0).to(tl.float32))
    if FIXED_N >= 0:
        n = tl.full((TT, G), FIXED_N, tl.int32)
    else:
        if PIVOT_PTR:  # ``pivot`` points at the device state (pivot, tie share); ``tie`` is unused
            tie = tl.load(pivot + 1)
            pivot = tl.load(pivot)
        gt = tl.sum(tl.sum((x > pivot).to(tl.int32), axis=2), axis=1)  # [tile]
        eq = tl.sum(tl.sum((x == pivot).to(tl.int32), axis=2), axis=1)
        c = gt.to(tl.float32) + eq.to(tl.float32) * tie  # wanted entries, ties shared
        # bracket c / G (the tile's wanted n) between configurations 0 < C1 < C2 < M; G = unit
        lo = tl.where(c >= M * G, M, tl.where(c >= C2 * G, C2, tl.where(c >= C1 * G, C1, 0)))
        hi = tl.where(c <= 0, 0, tl.where(c <= C1 * G, C1, tl.where(c <= C2 * G, C2, M)))
        u = tl.rand(seed, r.to(tl.int32) * n_tile_cols + t)
        take = (u * ((hi - lo) * G).to(tl.float32)) < (c - (lo * G).to(tl.float32))
        n = tl.broadcast_to(tl.where(take, hi, lo)[:, None], (TT, G))
    keep = tl.zeros([TT, G, M], dtype=tl.int32)
    for e in tl.static_range(M):
        xe = tl.sum(tl.where(ev[None, None, :] == e, x, 0.0), axis=2)[:, :, None]  # entry e of each group
        beats = (x > xe) | ((x == xe) & (ev[None, None, :] < e))
        rank = tl.sum(beats.to(tl.int32), axis=2)  # [TT, G]
        keep = tl.where(ev[None, None, :] == e, (rank < n).to(tl.int32)[:, :, None], keep)
    tl.store(m_ptr + r * stride_m + col, keep.to(tl.int8), mask=inb)


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def has_fast_kernel(pattern: Pattern) -> bool:
    """Whether a fused Triton kernel exists for this pattern (else the reference runs)."""
    if isinstance(pattern, TBS):
        # x = 32 would compile (four lanes a tile) but take minutes and spill: the reference runs
        return pattern.configs == tuple(range(pattern.x + 1)) and pattern.x in (4, 8, 16)
    if isinstance(pattern, Vegeta):
        m = pattern.m
        default = (0, max(1, m // 4), max(1, m // 2), m)
        ok_cfg = pattern.configs == tuple(sorted(set(default))) and len(pattern.configs) == 4
        return ok_cfg and _pow2(m) and _pow2(pattern.tile_len // m)
    if isinstance(pattern, NM):
        return _pow2(pattern.m)
    return False


# launch tunables (elements per program, warps), from scripts/gpu_sweep_flex.py on an H100 at a
# 13824x5120 bf16 weight (results/tuning/h100_sweep_flex.txt): 2:4 98%, Vegeta(4) 53%, Vegeta(8)
# 57%, TBS(8) 98% of the copy bandwidth. Group size m <= 4 wants small programs, m = 8 twice that.
GROUPS_ELEMS, GROUPS_WARPS = 1024, 4
# TBS(x >= 8) (``_flex_tbs_kernel``): a tile takes x / 8 lanes (all x rows, 8 columns each), so
# CIRCULANT_ELEMS is the |w| budget of a program at x = 8 (x / 8 times more at larger x: the same
# per lane); keep CIRCULANT_ELEMS / 64 >= 32 * CIRCULANT_WARPS, or lanes hold copies of tiles.
# (The name stays from the wrapped-diagonal kernel; scripts/gpu_probe_tbs_select.py tunes it.)
CIRCULANT_ELEMS, CIRCULANT_WARPS = 8192, 4


MaskLaunch = tuple[object, tuple[int, int], tuple, int]  # kernel, grid, positional args, num_warps


def mask_launch(
    w: torch.Tensor,
    out: torch.Tensor,
    pattern: Pattern,
    pivot: float | torch.Tensor,
    seed: int,
    tie: float = 1.0,
) -> MaskLaunch:
    """The launch of ``pattern``'s fused kernel writing the mask of ``w`` (2-D, unit column
    stride) into ``out`` (bool, same shape): kernel, grid, every argument in signature order
    (constexprs included, as Triton binds them) and warps. ``pivot`` is a float (then ``tie``
    is used) or a float32 device tensor holding (pivot, tie share) (``PIVOT_PTR``)."""
    r, c = w.shape
    m8 = out.view(torch.int8)
    dev = isinstance(pivot, torch.Tensor)
    if not dev:
        pivot, tie = float(pivot), float(tie)
    else:
        tie = 0.0
    if isinstance(pattern, TBS) and pattern.x == 4:
        from kernels._flex_tbs4_triton import flex_tbs4_kernel

        tcols = c // 4
        tc = min(128, triton.next_power_of_2(tcols))
        args = (w, m8, pivot, tie, seed, r // 4, tcols, w.stride(0), out.stride(0), tc, dev)
        return flex_tbs4_kernel, (r // 4, triton.cdiv(tcols, tc)), args, 4
    if isinstance(pattern, TBS):
        x = pattern.x
        tcols = c // x
        tiles = (r // x) * tcols
        # the interpreter pays per operation, not per entry: one program for up to 4096 tiles
        budget = 4096 if triton_interpret() else CIRCULANT_ELEMS // (8 * x)
        tc = max(1, min(triton.next_power_of_2(tiles), budget))
        args = (w, m8, pivot, tie, seed, tcols, tiles, w.stride(0), out.stride(0), x, tc, SWEEPS, dev)
        return _flex_tbs_kernel, (triton.cdiv(tiles, tc), 1), args, CIRCULANT_WARPS
    if isinstance(pattern, Vegeta):
        m, g, fixed = pattern.m, pattern.tile_len // pattern.m, -1
        c1, c2 = pattern.configs[1], pattern.configs[2]
    else:  # NM
        m, g, fixed, c1, c2 = pattern.m, 1, pattern.n, 1, 1
    tcols = c // (g * m)
    elems = GROUPS_ELEMS if m <= 4 else 2 * GROUPS_ELEMS
    tt = max(1, min(triton.next_power_of_2(tcols), elems // (g * m)))
    args = (w, m8, pivot, tie, seed, tcols, w.stride(0), out.stride(0), g, m, tt, c1, c2, fixed, dev)
    return _flex_groups_kernel, (r, triton.cdiv(tcols, tt)), args, GROUPS_WARPS


def fast_mask_triton(w: torch.Tensor, pattern: Pattern, pivot: float, seed: int, tie: float = 1.0) -> torch.Tensor:
    """Launch the fused kernel of ``pattern`` (see ``has_fast_kernel``) on a 2-D weight."""
    if w.stride(1) != 1:
        w = w.contiguous()
    out = torch.empty(w.shape, dtype=torch.bool, device=w.device)
    kernel, grid, args, warps = mask_launch(w, out, pattern, pivot, seed, tie)
    kernel[grid](*args, num_warps=warps)
    return out


@triton.jit
def _tile_uniforms_kernel(u_ptr, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(u_ptr + offs, tl.rand(seed, offs), mask=offs < n)


def tile_uniforms(seed: int, n: int, device: torch.device) -> torch.Tensor:
    """The uniforms ``tl.rand(seed, t)`` for tiles t in [0, n): what the mask kernels draw."""
    u = torch.empty(n, dtype=torch.float32, device=device)
    if n:
        _tile_uniforms_kernel[(triton.cdiv(n, 1024),)](u, seed, n, BLOCK=1024)
    return u
