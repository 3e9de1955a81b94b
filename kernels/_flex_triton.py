"""Triton kernels of FAST's fused mask generation (``flex_mask(method="fast")``).

One pass over the weight per pattern family: load a block of tiles, count |w| > pivot and
|w| == pivot per tile (ties weighted by the tie share), draw u = Philox(seed, tile)
(``tl.rand``), choose the configuration by the same float32 expression as the reference
(``kernels.flex.choose_configs``), select within the tile, write the byte mask.

Tiles to threads or blocks, by size: a program (thread block) takes one tile row and as many
tiles along it as fill a fixed element budget (``GROUPS_ELEMS`` / ``CIRCULANT_ELEMS``, tuned per
family). Inside it, a group of m <= 8 entries sits in one thread's registers (the last, contiguous
axis), so ranking within a group never leaves the thread; a tile larger than a group (a Vegeta
tile of 16 groups, a TBS tile of x*x) is spread over the threads of the block and reduced across
them; a block holds many small tiles or a few large ones, never a fraction of one.

- TBS(4,4): ``_flex_tbs4_triton.py`` (generated; exact selection for every n).
- TBS(x>=8): wrapped-diagonal heuristic (the n best of the x diagonals {(i, (i+s) mod x)}).
- Vegeta(m) and n:m: top-n per group of m by rank (ties to the lower index).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.patterns import NM, TBS, Pattern, Vegeta


@triton.jit(do_not_specialize=["seed"])
def _flex_tbs_circulant_kernel(
    w_ptr,
    m_ptr,
    pivot,
    tie,
    seed,
    n_tile_cols,
    stride_w,
    stride_m,
    X: tl.constexpr,
    TC: tl.constexpr,
    PIVOT_PTR: tl.constexpr = False,
):
    if PIVOT_PTR:  # ``pivot`` points at the device state (pivot, tie share); ``tie`` is unused
        tie = tl.load(pivot + 1)
        pivot = tl.load(pivot)
    # one tile row, TC tiles along it, each loaded in its natural layout [tile, i, j] (j contiguous)
    tr = tl.program_id(0)
    tc = tl.program_id(1) * TC + tl.arange(0, TC)
    i = tl.arange(0, X)
    j = tl.arange(0, X)
    col = X * tc[:, None, None] + j[None, None, :]
    row = (X * tr + i).to(tl.int64)
    inb = (tc < n_tile_cols)[:, None, None]
    x = tl.abs(tl.load(w_ptr + row[None, :, None] * stride_w + col, mask=inb, other=0.0).to(tl.float32))
    gt = tl.sum(tl.sum((x > pivot).to(tl.int32), axis=2), axis=1)  # [tile]
    eq = tl.sum(tl.sum((x == pivot).to(tl.int32), axis=2), axis=1)
    c = gt.to(tl.float32) + eq.to(tl.float32) * tie  # wanted entries, ties shared
    lo = tl.floor(c / X)
    u = tl.rand(seed, tr * n_tile_cols + tc)
    n = (lo + ((u * X) < (c - X * lo)).to(tl.float32)).to(tl.int32)
    # wrapped diagonal s holds the entries with (j - i) mod X == s; score = its |w| sum
    diag = (j[None, None, :] - i[None, :, None] + X) % X  # [1, i, j]
    s_idx = tl.arange(0, X)
    score = tl.zeros([TC, X], dtype=tl.float32)
    for s in tl.static_range(X):
        ds = tl.sum(tl.sum(tl.where(diag == s, x, 0.0), axis=2), axis=1)  # [tile]
        score = tl.where(s_idx[None, :] == s, ds[:, None], score)
    a = score[:, :, None]
    b = score[:, None, :]
    before = s_idx[None, None, :] < s_idx[None, :, None]
    rank = tl.sum(((b > a) | ((b == a) & before)).to(tl.int32), axis=2)  # [tile, s]: per tile, cheap
    keep_s = (rank < n[:, None]).to(tl.int32)
    keep = tl.zeros([TC, X, X], dtype=tl.int32)
    for s in tl.static_range(X):
        ks = tl.sum(tl.where(s_idx[None, :] == s, keep_s, 0), axis=1)  # [tile]
        keep = tl.where(diag == s, ks[:, None, None], keep)
    tl.store(m_ptr + row[None, :, None] * stride_m + col, keep.to(tl.int8), mask=inb)


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
        return pattern.configs == tuple(range(pattern.x + 1)) and (pattern.x == 4 or _pow2(pattern.x))
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
        tc = max(1, min(triton.next_power_of_2(tcols), CIRCULANT_ELEMS // (x * x)))
        args = (w, m8, pivot, tie, seed, tcols, w.stride(0), out.stride(0), x, tc, dev)
        return _flex_tbs_circulant_kernel, (r // x, triton.cdiv(tcols, tc)), args, CIRCULANT_WARPS
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
