"""Triton kernels of FAST's fused mask generation (``flex_mask(method="fast")``).

One pass over the weight per pattern family: load a block of tiles, count |w| > pivot and
|w| == pivot per tile (ties weighted by the tie share), draw u = Philox(seed, tile)
(``tl.rand``), choose the configuration by the same float32 expression as the reference
(``kernels.ops.flex.choose_configs``), select within the tile, write the byte mask.

Tiles to threads or blocks, by size: a program (thread block) takes one tile row and as many
tiles along it as fill a fixed element budget (``GROUPS_ELEMS`` / ``CIRCULANT_ELEMS``, tuned per
family). Inside it, a group of m <= 8 entries sits in one thread's registers (the last, contiguous
axis), so ranking within a group never leaves the thread; a tile larger than a group (a Vegeta
tile of 16 groups, a TBS tile of x*x) is spread over the threads of the block and reduced across
them; a block holds many small tiles or a few large ones, never a fraction of one.

Each family's body is a jit function over one program's tiles (``_tbs_tiles``, ``_groups_tiles``,
``flex_tbs4_tiles``) run by two kernels: one weight on a 2-D grid (``_flex_*_kernel``, what
``mask_launch`` binds: the same compiled code as before the split), and up to 8 weights in one
1-D launch (``_flex_*_multi_kernel``, ``multi_mask_launches``; ``_multi_triton``), so a single
weight's launch carries no slot arguments (30 more arguments cost eager callers host time a launch).

- TBS(4,4): ``_flex_tbs4_triton.py`` (generated; exact selection for every n).
- TBS(8,8), TBS(16,16): ``_flex_tbs_kernel``, the selection of ``kernels.ops.patterns.tbs_select_swaps``
  (the n best wrapped diagonals and anti-diagonals, each improved by SWEEPS sweeps of row-pair
  swaps, the better kept), the reference's float32 operations in its order.
- Vegeta(m) and n:m: top-n per group of m by rank (ties to the lower index).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops._chain_triton import chain_prologue
from kernels.ops._multi_triton import MULTI_SLOTS, SCALARS, aligned, multi_program, multi_scalars
from kernels.ops.patterns import NM, SWEEPS, TBS, Pattern, Vegeta


@triton.jit
def _set(tup, i: tl.constexpr, v):
    """``tup`` with entry ``i`` replaced by ``v`` (tuples are the kernel's arrays of rows)."""
    return tup[:i] + (v,) + tup[i + 1 :]


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
def _best_combine(hi1, ja1, lo1, jb1, hi2, ja2, lo2, jb2):
    """Merge two lanes' (largest, column, smallest, column), lowest column on ties."""
    ta = (hi2 > hi1) | ((hi2 == hi1) & (ja2 < ja1))
    tb = (lo2 < lo1) | ((lo2 == lo1) & (jb2 < jb1))
    return tl.where(ta, hi2, hi1), tl.where(ta, ja2, ja1), tl.where(tb, lo2, lo1), tl.where(tb, jb2, jb1)


@triton.jit
def _permutation_start(t, n, hh, X: tl.constexpr, ANTI: tl.constexpr):
    """Rows (local 8-column bitmasks, [TC, H] each) of the n best permutations of one family,
    and their retained sum [TC]: permutation s holds column (i + s) mod X of row i (wrapped
    diagonals) or (s - i) mod X (anti-diagonals, ``ANTI``); scores summed row by row."""
    H: tl.constexpr = X // 8
    score = ()
    for s in tl.static_range(X):
        acc = tl.zeros_like(t[0][0])
        for i in tl.static_range(X):  # column c = (s - i) mod X or (i + s) mod X, in lane c // 8
            v = t[i][(((s - i) if ANTI else (i + s)) % X) % 8]
            if H > 1:
                v = tl.where(hh == (((s - i) if ANTI else (i + s)) % X) // 8, v, 0.0)
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
        rows = rows + (((bits[:, None] >> (8 * hh)) & 255),)
    return rows, total


@triton.jit
def _tree_best(v, LARGEST: tl.constexpr):
    """(value, index) of the largest (``LARGEST``) or smallest of 8 values, the lowest index on
    ties: a tree of pairwise merges (depth 3) whose left side holds the lower indices and wins ties,
    so the same pick as a scan in index order with a strict test (depth 8)."""
    vals = v
    idx = (0, 1, 2, 3, 4, 5, 6, 7)
    for level in tl.static_range(3):
        nv = ()
        ni = ()
        for m in tl.static_range(4 >> level):
            take = (vals[2 * m + 1] > vals[2 * m]) if LARGEST else (vals[2 * m + 1] < vals[2 * m])
            nv = nv + (tl.where(take, vals[2 * m + 1], vals[2 * m]),)
            ni = ni + (tl.where(take, idx[2 * m + 1], idx[2 * m]),)
        vals = nv
        idx = ni
    return vals[0], idx[0]


@triton.jit
def _best_swap(d, ki, kp, hh, H: tl.constexpr):
    """For a row pair (i, p) with d[j] = t[p, j] - t[i, j] (this lane's 8 columns): the largest
    d over a = K_i & ~K_p and the smallest over b = K_p & ~K_i, each with its column (lowest on
    ties; -inf / +inf and column 0 if empty). Returns (gain, column i gives, column p gives), per
    tile."""
    a = ki & ~kp
    b = kp & ~ki
    da = ()
    db = ()
    for j in tl.static_range(8):
        da = da + (tl.where((a & (1 << j)) != 0, d[j], float("-inf")),)
        db = db + (tl.where((b & (1 << j)) != 0, d[j], float("inf")),)
    hi, ja = _tree_best(da, True)
    lo, jb = _tree_best(db, False)
    hi, ja, lo, jb = tl.reduce((hi, ja + 8 * hh, lo, jb + 8 * hh), 1, _best_combine)
    return hi - lo, ja, jb


@triton.jit
def _pinned(t, z):
    """The tile ``t`` with every value OR-ed bitwise with ``z``, a zero the compiler cannot see:
    the same values, but new ones each sweep, so the row pairs' differences are not hoisted out
    of (or shared between) the sweeps; hoisted, they hold 28 x 8 registers and the kernel spills."""
    out = ()
    for i in tl.static_range(len(t)):
        row = ()
        for j in tl.static_range(len(t[i])):
            row = row + ((t[i][j].to(tl.int32, bitcast=True) | z).to(tl.float32, bitcast=True),)
        out = out + (row,)
    return out


@triton.jit
def _swap_round(t, k, total, hh, r: tl.constexpr, X: tl.constexpr):
    """One round of row-pair swaps (rows i and i XOR r) on one start's rows ``k``."""
    H: tl.constexpr = X // 8
    for i in tl.static_range(X):
        if i < (i ^ r):  # the pair (i, p = i XOR r)
            d = ()
            for j in tl.static_range(8):
                d = d + (t[i ^ r][j] - t[i][j],)
            gain, ja, jb = _best_swap(d, k[i], k[i ^ r], hh, H)
            move = gain > 0
            ga = tl.where((hh == (ja >> 3)[:, None]), 1 << (ja & 7)[:, None], 0)
            gb = tl.where((hh == (jb >> 3)[:, None]), 1 << (jb & 7)[:, None], 0)
            flip = tl.where(move[:, None], ga | gb, 0)
            k = _set(k, i, k[i] ^ flip)
            k = _set(k, i ^ r, k[i ^ r] ^ flip)
            total = total + tl.where(move, gain, 0.0)
    return k, total


@triton.jit(do_not_specialize=["seed"])
def _flex_tbs_kernel(
    w_ptr, m_ptr, pivot, tie, seed, n_tile_cols, stride_w, stride_m,
    X: tl.constexpr, TC: tl.constexpr, SWEEPS: tl.constexpr, PIVOT_PTR: tl.constexpr = False,
    PDL: tl.constexpr = 0,
):  # fmt: skip
    """TBS(X) for X = 8, 16 on one weight: program (tile row, block of TC tiles); ``_tbs_tiles``.
    ``PIVOT_PTR``: ``pivot`` points at the device state (pivot, tie share), ``tie`` is unused;
    ``PDL``: a chained launch (``_chain_triton``)."""
    chain_prologue(PDL)
    if PIVOT_PTR:
        tie = tl.load(pivot + 1)
        pivot = tl.load(pivot)
    _tbs_tiles(
        w_ptr,
        m_ptr,
        pivot,
        tie,
        seed,
        n_tile_cols,
        stride_w,
        stride_m,
        tl.program_id(0),
        tl.program_id(1),
        X,
        TC,
        SWEEPS,
    )


@triton.jit(do_not_specialize=["seed"])
def _flex_tbs_multi_kernel(
    w_ptr, m_ptr, pivot, tie, seed,
    x1, x2, x3, x4, x5, x6, x7,
    s1, s2, s3, s4, s5, s6, s7, c0, c1, c2, c3, c4, c5, c6, c7, o0, o1, o2, o3, o4, o5, o6, o7,
    X: tl.constexpr, TC: tl.constexpr, SWEEPS: tl.constexpr, PIVOT_PTR: tl.constexpr = False,
    PDL: tl.constexpr = 0,
):  # fmt: skip
    """``_flex_tbs_kernel`` over up to 8 weights in one 1-D launch (``_multi_triton``)."""
    chain_prologue(PDL)
    if PIVOT_PTR:
        tie = tl.load(pivot + 1)
        pivot = tl.load(pivot)
    tr, pid1, w, m, n_tile_cols, stride = multi_program(
        w_ptr, x1, x2, x3, x4, x5, x6, x7, m_ptr,
        s1, s2, s3, s4, s5, s6, s7, c0, c1, c2, c3, c4, c5, c6, c7, o0, o1, o2, o3, o4, o5, o6, o7, X, TC,
    )  # fmt: skip
    _tbs_tiles(w, m, pivot, tie, seed, n_tile_cols, stride, stride, tr, pid1, X, TC, SWEEPS)


@triton.jit
def _tbs_tiles(
    w_ptr, m_ptr, pivot, tie, seed, n_tile_cols, stride_w, stride_m, tr, pid1,
    X: tl.constexpr, TC: tl.constexpr, SWEEPS: tl.constexpr,
):  # fmt: skip
    """TBS(X) masks of one program's TC tiles (tile row ``tr``, tile block ``pid1``): count vs
    pivot, Philox draw of n per tile, then the selection of ``kernels.ops.patterns.tbs_select_swaps``
    (two permutation starts, SWEEPS sweeps of row-pair swaps, the better start). A tile's X rows
    are X tensors of [TC, H] per column (H = X / 8 lanes hold 8 columns each), so a tile sits in H
    threads' registers, a row pair's work is elementwise, and only the per-pair maxima cross lanes
    (for X = 16)."""
    H: tl.constexpr = X // 8
    tc = pid1 * TC + tl.arange(0, TC)
    hh = tl.arange(0, H)[None, :]
    row0 = (X * tr).to(tl.int64)
    # rows are loaded as [TC * H, 8] (tile-major, then column group): neighbouring lanes hold the
    # column groups of one tile, so the per-pair maxima cross lanes of a warp only
    q = pid1 * (TC * H) + tl.arange(0, TC * H)
    col = 8 * q[:, None] + tl.arange(0, 8)[None, :]
    inb = (q < n_tile_cols * H)[:, None]
    gt = tl.zeros([TC * H], dtype=tl.int32)
    eq = tl.zeros([TC * H], dtype=tl.int32)
    # a loop over rows, not an unrolled sequence: one load op (Triton's coalescing pass walks the
    # whole computation connected to each load and store op; unrolled, compiling took minutes).
    # Each pass appends row i and drops the oldest, so after X passes t[i] holds row i.
    zero = tl.zeros([TC, H], dtype=tl.float32)
    t = ()  # t[i][j]: |w| of row i, column 8 h + j of each tile (lane h), [TC, H] float32
    for _ in tl.static_range(X):
        t = t + ((zero, zero, zero, zero, zero, zero, zero, zero),)
    for i in range(X):
        x = tl.abs(tl.load(w_ptr + (row0 + i) * stride_w + col, mask=inb, other=0.0).to(tl.float32))
        gt += tl.sum((x > pivot).to(tl.int32), axis=1)
        eq += tl.sum((x == pivot).to(tl.int32), axis=1)
        t = t[1:] + (_unstack(tl.reshape(x, (TC, H, 2, 2, 2)), 8),)
    gt = tl.sum(tl.reshape(gt, (TC, H)), axis=1)
    eq = tl.sum(tl.reshape(eq, (TC, H)), axis=1)
    c = gt.to(tl.float32) + eq.to(tl.float32) * tie  # wanted entries, ties shared
    lo = tl.floor(c / X)
    u = tl.rand(seed, tr * n_tile_cols + tc)
    n = (lo + ((u * X) < (c - X * lo)).to(tl.float32)).to(tl.int32)
    kd, total_d = _permutation_start(t, n, hh, X, False)
    ka, total_a = _permutation_start(t, n, hh, X, True)
    for it in range(SWEEPS):
        t = _pinned(t, (n_tile_cols + it) >> 31)  # n_tile_cols + it < 2^31: a zero
        for r in tl.static_range(1, X):
            kd, total_d = _swap_round(t, kd, total_d, hh, r, X)
            ka, total_a = _swap_round(t, ka, total_a, hh, r, X)
    anti = (total_a > total_d)[:, None]
    keep = ()
    for i in tl.static_range(X):
        keep = keep + (tl.where(anti, ka[i], kd[i]),)
    for i in range(X):  # one store op, as for the loads
        y = tl.reshape((keep[0][:, :, None] >> tl.arange(0, 8)[None, None, :]) & 1, (TC * H, 8)).to(tl.int8)
        tl.store(m_ptr + (row0 + i) * stride_m + col, y, mask=inb)
        keep = keep[1:] + (keep[0],)


@triton.jit(do_not_specialize=["seed"])
def _flex_groups_kernel(
    w_ptr, m_ptr, pivot, tie, seed, n_tile_cols, stride_w, stride_m,
    G: tl.constexpr, M: tl.constexpr, TT: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr,
    FIXED_N: tl.constexpr, PIVOT_PTR: tl.constexpr = False, PDL: tl.constexpr = 0,
):  # fmt: skip
    # Vegeta and n:m on one weight: program (row, block of TT tiles); _groups_tiles.
    # PDL: a chained launch (_chain_triton)
    chain_prologue(PDL)
    _groups_tiles(
        w_ptr, m_ptr, pivot, tie, seed, n_tile_cols, stride_w, stride_m, tl.program_id(0).to(tl.int64),
        tl.program_id(1), G, M, TT, C1, C2, FIXED_N, PIVOT_PTR,
    )  # fmt: skip


@triton.jit(do_not_specialize=["seed"])
def _flex_groups_multi_kernel(
    w_ptr, m_ptr, pivot, tie, seed,
    x1, x2, x3, x4, x5, x6, x7,
    s1, s2, s3, s4, s5, s6, s7, c0, c1, c2, c3, c4, c5, c6, c7, o0, o1, o2, o3, o4, o5, o6, o7,
    G: tl.constexpr, M: tl.constexpr, TT: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr,
    FIXED_N: tl.constexpr, PIVOT_PTR: tl.constexpr = False, PDL: tl.constexpr = 0,
):  # fmt: skip
    # _flex_groups_kernel over up to 8 weights in one 1-D launch (_multi_triton)
    chain_prologue(PDL)
    r, pid1, w, m, n_tile_cols, stride = multi_program(
        w_ptr, x1, x2, x3, x4, x5, x6, x7, m_ptr,
        s1, s2, s3, s4, s5, s6, s7, c0, c1, c2, c3, c4, c5, c6, c7, o0, o1, o2, o3, o4, o5, o6, o7, G * M, TT,
    )  # fmt: skip
    _groups_tiles(
        w, m, pivot, tie, seed, n_tile_cols, stride, stride, r.to(tl.int64), pid1, G, M, TT, C1, C2, FIXED_N, PIVOT_PTR
    )


@triton.jit
def _groups_tiles(
    w_ptr, m_ptr, pivot, tie, seed, n_tile_cols, stride_w, stride_m, r, pid1,
    G: tl.constexpr, M: tl.constexpr, TT: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr,
    FIXED_N: tl.constexpr, PIVOT_PTR: tl.constexpr,
):  # fmt: skip
    # one row r, TT tiles of G groups of M entries; configurations {0, C1, C2, M} or FIXED_N.
    # One contiguous [TT, G, M] load and store; the rank of entry e inside its group is counted
    # against the group's M entries along the last axis (held by one thread: no layout shuffles).
    t = pid1 * TT + tl.arange(0, TT)
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


# launch tunables (elements per program, warps), from scripts/probes/gpu_sweep_flex.py on an H100 at a
# 13824x5120 bf16 weight (results/tuning/h100_sweep_flex.txt): 2:4 98%, Vegeta(4) 53%, Vegeta(8)
# 57% of the copy bandwidth (TBS(8) 98% with the former wrapped-diagonal selection; with two
# swap sweeps the kernel is compute-bound, about 8%: docs/methods.md). Group size m <= 4 wants
# small programs, m = 8 twice that.
GROUPS_ELEMS, GROUPS_WARPS = 1024, 4
# TBS(x >= 8) (``_flex_tbs_kernel``): a tile takes x / 8 lanes (all x rows, 8 columns each), so
# CIRCULANT_ELEMS is the |w| budget of a program at x = 8 (x / 8 times more at larger x: the same
# per lane); keep CIRCULANT_ELEMS / 64 >= 32 * CIRCULANT_WARPS, or lanes hold copies of tiles.
# (The name stays from the wrapped-diagonal kernel; scripts/probes/gpu_probe_tbs_select.py tunes it.)
CIRCULANT_ELEMS, CIRCULANT_WARPS = 8192, 4


# Below this many values FlexMasker launches one mask kernel for up to 8 weights (else one a
# weight) and chains its launches with PDL (where supported): both shorten the gaps between
# kernels, which only small blocks notice. On an H100 (results/tuning/h100_probe_masker_launches
# *.txt) on a MAP-NEO 460M block (13.6M values) the single launch saved 7 us and PDL 4.5 us of
# 90; on a 7B block (264M values) the single launch cost 5-14% (its 2:4 programs of 1024 values
# pay the slot lookup each) and PDL 10% on 2:4. Between them the crossing is not measured.
MULTI_MAX_VALUES = 1 << 25

MaskLaunch = tuple[object, tuple[int, ...], tuple, int]  # kernel, grid, positional args, num_warps
_SLOTS = ("x1", "x2", "x3", "x4", "x5", "x6", "x7")


def _ordered(kernel: object, named: dict) -> tuple:
    """``named`` as the positional arguments of ``kernel`` (signature order, constexprs included)."""
    return tuple(named[a] for a in kernel.arg_names)


def _multi_kernel(kernel: object) -> object:
    """The one-launch-over-several-weights twin of a weight's mask kernel."""
    from kernels.ops._flex_tbs4_triton import flex_tbs4_kernel, flex_tbs4_multi_kernel

    twins = {
        _flex_tbs_kernel: _flex_tbs_multi_kernel,
        _flex_groups_kernel: _flex_groups_multi_kernel,
        flex_tbs4_kernel: flex_tbs4_multi_kernel,
    }
    return twins[kernel]


def _mask_args(
    w: torch.Tensor, out: torch.Tensor, pattern: Pattern, pivot: float | torch.Tensor, seed: int, tie: float
) -> tuple[object, tuple[int, int], dict, int]:
    """(kernel, 2-D grid, arguments by name, warps) of one weight's own launch."""
    r, c = w.shape
    m8 = out.view(torch.int8)
    dev = isinstance(pivot, torch.Tensor)
    if not dev:
        pivot, tie = float(pivot), float(tie)
    else:
        tie = 0.0
    named = dict(w_ptr=w, m_ptr=m8, pivot=pivot, tie=tie, seed=seed, stride_w=w.stride(0), stride_m=out.stride(0))
    named.update(PIVOT_PTR=dev, PDL=0)
    if isinstance(pattern, TBS) and pattern.x == 4:
        from kernels.ops._flex_tbs4_triton import flex_tbs4_kernel

        tcols = c // 4
        tc = min(128, triton.next_power_of_2(tcols))
        named.update(n_tile_rows=r // 4, n_tile_cols=tcols, TC=tc)
        return flex_tbs4_kernel, (r // 4, triton.cdiv(tcols, tc)), named, 4
    if isinstance(pattern, TBS):
        x = pattern.x
        tcols = c // x
        tc = max(1, min(triton.next_power_of_2(tcols), CIRCULANT_ELEMS // (8 * x)))
        named.update(n_tile_cols=tcols, X=x, TC=tc, SWEEPS=SWEEPS)
        return _flex_tbs_kernel, (r // x, triton.cdiv(tcols, tc)), named, CIRCULANT_WARPS
    if isinstance(pattern, Vegeta):
        m, g, fixed = pattern.m, pattern.tile_len // pattern.m, -1
        c1, c2 = pattern.configs[1], pattern.configs[2]
    else:  # NM
        m, g, fixed, c1, c2 = pattern.m, 1, pattern.n, 1, 1
    tcols = c // (g * m)
    elems = GROUPS_ELEMS if m <= 4 else 2 * GROUPS_ELEMS
    tt = max(1, min(triton.next_power_of_2(tcols), elems // (g * m)))
    named.update(n_tile_cols=tcols, G=g, M=m, TT=tt, C1=c1, C2=c2, FIXED_N=fixed)
    return _flex_groups_kernel, (r, triton.cdiv(tcols, tt)), named, GROUPS_WARPS


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
    kernel, grid, named, warps = _mask_args(w, out, pattern, pivot, seed, tie)
    return kernel, grid, _ordered(kernel, named), warps


def multi_mask_launches(
    weights: list[torch.Tensor],
    outs: list[torch.Tensor],
    base: torch.Tensor,
    pattern: Pattern,
    state: torch.Tensor,
    seed: int,
) -> list[MaskLaunch]:
    """The launches writing the masks of ``weights`` into ``outs`` (bool views into ``base``, one
    flat buffer) with the device pivot ``state``: one launch per run of up to ``MULTI_SLOTS``
    consecutive weights that share the kernel, its constexprs and warps (``_multi_triton``);
    a weight or mask that is not contiguous, or whose row length, mask offset or pointer is not
    a multiple of 16 elements, gets its own launch. Same masks, bit for bit, as ``mask_launch``
    weight by weight."""
    if base.dtype != torch.bool or not base.is_contiguous():
        raise ValueError("base must be a contiguous bool buffer holding every mask")
    if len(weights) != len(outs):
        raise ValueError(f"{len(weights)} weights but {len(outs)} masks")
    lo, hi = base.data_ptr(), base.data_ptr() + base.numel()
    runs: list[list] = []  # [key, [(weight, grid, named, mask offset)]]
    out: list[MaskLaunch] = []
    for w, o in zip(weights, outs, strict=True):
        kernel, grid, named, warps = _mask_args(w, o, pattern, state, seed, 0.0)
        offset = o.data_ptr() - lo
        inside = lo <= o.data_ptr() and o.data_ptr() + o.numel() <= hi
        dense = w.is_contiguous() and o.is_contiguous()
        if not (inside and dense and aligned(w.shape[1], offset, w.data_ptr() // w.element_size())):
            out.append((kernel, grid, _ordered(kernel, named), warps))
            continue
        key = (kernel, warps) + tuple(v for a, v in named.items() if a[0].isupper())
        if not runs or runs[-1][0] != key or len(runs[-1][1]) == MULTI_SLOTS:
            runs.append([key, []])
        runs[-1][1].append((w, grid, named, offset))
    for key, members in runs:
        kernel, warps = key[0], key[1]
        firsts = [0]
        for _w, grid, _named, _offset in members:
            firsts.append(firsts[-1] + grid[0] * grid[1])
        cols = [m[0].shape[1] for m in members]
        scalars = multi_scalars(firsts[:-1], cols, [m[3] for m in members])
        named = dict(members[0][2], m_ptr=base.view(torch.int8))
        pad = [members[0][0]] * (MULTI_SLOTS - len(members))
        named.update(zip(_SLOTS, [m[0] for m in members[1:]] + pad, strict=True))
        named.update(zip(SCALARS, scalars, strict=True))
        multi = _multi_kernel(kernel)
        out.append((multi, (firsts[-1],), _ordered(multi, named), warps))
    return out


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
