"""Triton kernels of ``kernels.ops.cslt_pack`` (layout in ``kernels/ops/cslt_pack.py``).

* ``_pack_kernel``: pack any operand (given a mask, or its nonzeros), values and metadata. One
  program packs 64 rows x 32*KB columns; the tile is loaded straight into the shape of the
  metadata, [32 word rows, 4*KB word columns, 4 contributors, 4 elements], so every reduction
  runs along axes that the kernel never reshapes. Strides are arguments (transposed views are
  packed without a copy). Used when a mask changes and by ``cslt_pack``.
* ``_repack_pair_values_kernel``: the per-step refresh of a transposable layer's packed pair:
  one coalesced 64x64 tile of W, packed along rows for W*M and, transposed in registers, for
  (W*M)^T; kept positions from each operand's own metadata, which stays as it is.
* ``_mvue_pack_kernel``: the per-backward MVUE + pack of the weight-gradient operand.
* ``_act_bwd_mvue_pack_kernel``: an activation backward whose result is that operand (dH of the
  fst FFN), computed, stored and MVUE-packed in one pass.
* ``_gated_bwd_mvue_pack_kernel``: the same for a gated activation (GEGLU / SwiGLU on a fused
  gate-and-up output dZ = [dgate, dup]): both halves of a row block in one program.

The two kept values of a group are stored as one 32-bit word (they are adjacent in the output)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops.geglu import act_and_grad
from kernels.ops.mvue import mvue_pair

ROWS = 64
# Transposed views are read with strided loads here. A coalesced [cols, rows] load permuted in the
# kernel was 8% faster for the weight pair at 4 warps on the H100 (triton 3.6) but gave wrong
# results at 8 and 16 warps (results/tuning/h100_probe_pack.txt), so it was removed. This kernel
# now packs only at mask changes and for callers of ``cslt_pack``; the per-step jobs have their
# own kernels below (2-D tiles, ``tl.trans``; bit-checked at every warp count tried).
NUM_WARPS = 4


@triton.jit
def _bits16(v, BF16: tl.constexpr):
    """fp32 -> the 16-bit pattern (in an int32) of bf16 (rounded to nearest even by hand: the
    interpreter truncates) or fp16."""
    if BF16:
        u = v.to(tl.uint32, bitcast=True)
        return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).to(tl.int32)
    else:
        return v.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF


@triton.jit
def _pack_kernel(
    a_ptr,
    keep_ptr,
    out32_ptr,
    meta_ptr,
    err_ptr,
    m,
    k,
    stride_ar,
    stride_ac,
    stride_kr,
    stride_kc,
    KB: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CHECK: tl.constexpr,
    SRC_F32: tl.constexpr,
    BF16: tl.constexpr,
):
    rt = tl.program_id(0)
    c0 = tl.program_id(1) * (32 * KB)
    wr = tl.arange(0, 32)[:, None, None]  # word row: rb * 8 + rr
    wc = tl.arange(0, 4 * KB)[None, :, None]  # word column: kb * 4 + gq
    cc = tl.arange(0, 4)[None, None, :]  # contributor: gh * 2 + h
    e = tl.arange(0, 4)[None, None, None, :]  # element of the group
    row3 = rt * 64 + (wr // 8) * 16 + (cc % 2) * 8 + wr % 8  # [32, 1, 4]
    group3 = c0 // 4 + (wc // 4) * 8 + (cc // 2) * 4 + wc % 4  # [1, 4KB, 4]
    valid3 = row3 < m
    row = row3[:, :, :, None]
    col = group3[:, :, :, None] * 4 + e
    ld_mask = (row < m) & (col < k)
    offs = row.to(tl.int64) * stride_ar + col.to(tl.int64) * stride_ac
    if SRC_F32:  # fp32 master weight rounded here
        bits = _bits16(tl.load(a_ptr + offs, mask=ld_mask, other=0.0), BF16)
    else:
        bits = tl.load(a_ptr + offs, mask=ld_mask, other=0).to(tl.int32) & 0xFFFF
    if HAS_MASK:
        koffs = row.to(tl.int64) * stride_kr + col.to(tl.int64) * stride_kc
        kp = tl.load(keep_ptr + koffs, mask=ld_mask, other=0) != 0
        bits = tl.where(kp, bits, 0)
        bad = tl.sum(kp.to(tl.int32), axis=3) != 2
    else:
        nz = ((bits & 0x7FFF) != 0).to(tl.int32)  # -0.0 is a zero
        nzc = tl.sum(nz, axis=3)
        before = tl.cumsum(nz, axis=3) - nz  # nonzeros before each element
        kp = (nz != 0) | ((e - before) < (2 - nzc)[:, :, :, None])  # fill with the first zeros
        bad = nzc > 2
    if CHECK:
        nbad = tl.sum(tl.sum(tl.sum((bad & valid3).to(tl.int32), axis=2), axis=1), axis=0)
        tl.atomic_add(err_ptr, nbad)
    i0 = tl.min(tl.where(kp, e, 4), axis=3)  # [32, 4KB, 4]
    i1 = tl.max(tl.where(kp, e, -1), axis=3)
    v0 = tl.sum(tl.where(e == i0[:, :, :, None], bits, 0), axis=3)
    v1 = tl.sum(tl.where(e == i1[:, :, :, None], bits, 0), axis=3)
    pair = v0 | (v1 << 16)
    tl.store(out32_ptr + row3.to(tl.int64) * (k // 4) + group3, pair, mask=valid3)
    code = tl.where(valid3, i0 | (i1 << 2), 14)  # rows past m: padding code
    word = tl.sum(code << (4 * (2 * (cc // 2) + cc % 2)), axis=2)  # [32, 4KB]
    wr2 = tl.arange(0, 32)[:, None]
    wc2 = tl.arange(0, 4 * KB)[None, :]
    block = (rt * (k // 32) + c0 // 32 + wc2 // 4) * 4 + wr2 // 8
    addr = block.to(tl.int64) * 32 + (wr2 % 8) * 4 + wc2 % 4
    tl.store(meta_ptr + addr, word.to(tl.int16))


def _launch(
    a: torch.Tensor,
    mask: torch.Tensor | None,
    out: torch.Tensor,
    err: torch.Tensor | None,
) -> None:
    """Pack ``a`` (any strides; fp32 or the 16-bit dtype of ``out``) into the flat ``out``."""
    m, k = a.shape
    src_f32 = a.dtype == torch.float32
    if not src_f32 and a.dtype != out.dtype:
        a = a.to(out.dtype)
    src = a if src_f32 else a.view(torch.int16)
    keep = mask.view(torch.int8) if mask is not None else src
    flat16 = out.view(torch.int16)
    vals = m * k // 2
    kb = 2 if k % 64 == 0 else 1
    grid = (triton.cdiv(m, ROWS), k // (32 * kb))
    _pack_kernel[grid](
        src,
        keep,
        flat16[:vals].view(torch.int32),
        flat16[vals:],
        err if err is not None else flat16,
        m,
        k,
        src.stride(0),
        src.stride(1),
        keep.stride(0),
        keep.stride(1),
        KB=kb,
        HAS_MASK=mask is not None,
        CHECK=err is not None,
        SRC_F32=src_f32,
        BF16=out.dtype == torch.bfloat16,
        num_warps=NUM_WARPS,
    )


def pack_into(
    a: torch.Tensor,
    mask: torch.Tensor | None,
    out: torch.Tensor,
    out_t: torch.Tensor | None,
    err: torch.Tensor | None,
) -> None:
    """Pack ``a`` [m, k] (times ``mask``) into the flat buffer ``out`` (``packed_numel``), and
    when ``out_t`` is given also (a*mask)^T [k, m], read through a transposed view (no copy);
    ``err`` an int32 counter of groups that are not 2:4 (None: no check)."""
    _launch(a, mask, out, err)
    if out_t is not None:
        _launch(a.t(), None if mask is None else mask.t(), out_t, err)


def pack_mvue_t_into(x: torch.Tensor, seed: torch.Tensor, out: torch.Tensor) -> None:
    """Pack MVUE(x^T) along x's rows (x [T, n] -> operand [n, T]) from the strided view x.t()."""
    mvue_pack_into(x.t(), seed, out)


# --------------------------------------------------------------------------------------------
# values-only refresh of a packed pair (the per-step path of a transposable 2:4 layer)
# --------------------------------------------------------------------------------------------


@triton.jit
def _codes_tile(meta_ptr, r0, c0, k, BK: tl.constexpr):
    """[64, BK/4] codes (i0 | i1 << 2) of rows r0 .. r0+63 (r0 % 64 == 0) and groups c0/4 ..
    of a packed [*, k] operand, read from its metadata words in their own order (coalesced) and
    spread to (row, group): row = rb * 16 + h * 8 + rr, group = kb * 8 + gh * 4 + gq."""
    rb = tl.arange(0, 4)[:, None, None, None]
    rr = tl.arange(0, 8)[None, :, None, None]
    kb = tl.arange(0, BK // 32)[None, None, :, None]
    gq = tl.arange(0, 4)[None, None, None, :]
    block = ((r0 // 64) * (k // 32) + c0 // 32 + kb) * 4 + rb
    word = tl.load(meta_ptr + block.to(tl.int64) * 32 + rr * 4 + gq).to(tl.int32) & 0xFFFF  # [rb, rr, kb, gq]
    w6 = tl.reshape(word, (4, 1, 8, BK // 32, 1, 4))
    h = tl.arange(0, 2)[None, :, None, None, None, None]
    gh = tl.arange(0, 2)[None, None, None, None, :, None]
    return tl.reshape((w6 >> (4 * (2 * gh + h))) & 0xF, (64, BK // 4))


@triton.jit
def _kept_pairs(bits, code, BK: tl.constexpr):
    """The two kept 16-bit patterns of every group of 4 of ``bits`` [64, BK] (positions from
    ``code`` [64, BK/4]) as one int32 each: the first kept in the low half."""
    b4 = tl.reshape(bits, (64, BK // 4, 2, 2))  # element e = 2 * i + j
    be, bo = tl.split(b4)
    b0, b2 = tl.split(be)
    b1, b3 = tl.split(bo)
    i0 = code & 3
    i1 = code >> 2
    lo = tl.where(i0 == 0, b0, tl.where(i0 == 1, b1, b2))
    hi = tl.where(i1 == 3, b3, tl.where(i1 == 2, b2, b1))
    return lo | (hi << 16)


@triton.jit
def _pruned_positions(code):
    """Positions j0 < j1 of the two entries of a group that its code (i0 | i1 << 2) prunes."""
    i0 = code & 3
    i1 = code >> 2
    j0 = tl.where(i0 != 0, 0, tl.where(i1 != 1, 1, 2))
    j1 = tl.where(i1 != 3, 3, tl.where(i0 != 2, 2, 1))
    return j0, j1


@triton.jit
def _pruned_pairs(bits, code, BK: tl.constexpr):
    """The two pruned (not kept) 16-bit patterns of every group of 4 of ``bits`` [64, BK], in
    position order, as one int32 each (the complement of :func:`_kept_pairs`)."""
    b4 = tl.reshape(bits, (64, BK // 4, 2, 2))
    be, bo = tl.split(b4)
    b0, b2 = tl.split(be)
    b1, b3 = tl.split(bo)
    j0, j1 = _pruned_positions(code)
    lo = tl.where(j0 == 0, b0, tl.where(j0 == 1, b1, b2))
    hi = tl.where(j1 == 3, b3, tl.where(j1 == 2, b2, b1))
    return lo | (hi << 16)


@triton.jit
def _repack_pair_values_kernel(
    w_ptr,
    meta_ptr,
    meta_t_ptr,
    out32_ptr,
    out_t32_ptr,
    pruned32_ptr,
    r,
    c,
    stride_wr,
    SRC_F32: tl.constexpr,
    BF16: tl.constexpr,
    PRUNED: tl.constexpr,
):
    """Values-only refresh of a packed pair from one 64 x 64 tile of W per program: the tile is
    read once (coalesced), packed along its rows for W*M and, transposed in registers, along its
    columns for (W*M)^T; each operand's kept positions come from its own metadata. With PRUNED,
    the pruned values of W (in the 16-bit dtype) go to ``pruned32`` in the layout of W*M's
    values: what the masked decay of the backward reads instead of the fp32 weight and the mask."""
    r0 = tl.program_id(0) * 64
    c0 = tl.program_id(1) * 64
    rows = r0 + tl.arange(0, 64)
    cols = c0 + tl.arange(0, 64)
    offs = rows[:, None].to(tl.int64) * stride_wr + cols[None, :]
    if SRC_F32:  # noqa: SIM108 (a constexpr branch of a Triton kernel)
        bits = _bits16(tl.load(w_ptr + offs), BF16)
    else:
        bits = tl.load(w_ptr + offs).to(tl.int32) & 0xFFFF
    g = tl.arange(0, 16)
    codes = _codes_tile(meta_ptr, r0, c0, c, 64)
    pairs = _kept_pairs(bits, codes, 64)
    word_offs = rows[:, None].to(tl.int64) * (c // 4) + c0 // 4 + g[None, :]
    tl.store(out32_ptr + word_offs, pairs)
    if PRUNED:
        tl.store(pruned32_ptr + word_offs, _pruned_pairs(bits, codes, 64))
    pairs_t = _kept_pairs(tl.trans(bits), _codes_tile(meta_t_ptr, c0, r0, r, 64), 64)
    tl.store(out_t32_ptr + cols[:, None].to(tl.int64) * (r // 4) + r0 // 4 + g[None, :], pairs_t)


# warps of the values-only pair refresh: 2, 4 and 8 ran within 3% of each other on the H100
# (results/tuning/h100_probe_pack_kernels_pair.txt)
PAIR_WARPS = 4


def repack_pair_values(
    w: torch.Tensor, out: torch.Tensor, out_t: torch.Tensor, pruned: torch.Tensor | None = None
) -> None:
    """Overwrite the values of the packed pair ``out`` (pack(W*M), flat) and ``out_t``
    (pack((W*M)^T), flat) with those of ``w`` [r, c] (row-major; fp32 or their 16-bit dtype),
    keeping their metadata, i.e. their mask; ``pruned`` (r * c / 2 of the 16-bit dtype): also
    the pruned values, two per group in position order."""
    r, c = w.shape
    src_f32 = w.dtype == torch.float32
    src = w if src_f32 else w.view(torch.int16)
    flat16, flat16_t = out.view(torch.int16), out_t.view(torch.int16)
    vals = r * c // 2
    _repack_pair_values_kernel[(r // 64, c // 64)](
        src,
        flat16[vals:],
        flat16_t[vals:],
        flat16[:vals].view(torch.int32),
        flat16_t[:vals].view(torch.int32),
        flat16[:vals].view(torch.int32) if pruned is None else pruned.view(torch.int32),
        r,
        c,
        src.stride(0),
        SRC_F32=src_f32,
        BF16=out.dtype == torch.bfloat16,
        PRUNED=pruned is not None,
        num_warps=PAIR_WARPS,
    )


# --------------------------------------------------------------------------------------------
# masked decay from the pruned values (the per-backward grad cast of a transposable 2:4 layer)
# --------------------------------------------------------------------------------------------


@triton.jit
def _from_bits16(b, BF16: tl.constexpr):
    """The 16-bit patterns ``b`` (int32, low half) as fp32 values of bf16 or fp16."""
    if BF16:
        return (b << 16).to(tl.float32, bitcast=True)
    else:
        return b.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _decay_cast_pruned_kernel(
    g_ptr,
    pruned32_ptr,
    meta_ptr,
    out_ptr,
    alpha,
    r,
    c,
    stride_gr,
    BF16: tl.constexpr,
):
    """out = float32(G) + alpha * (pruned values at their positions) for one 64 x 64 tile: reads
    the 16-bit G, the pruned values (half a weight in the 16-bit dtype) and W*M's metadata,
    instead of the fp32 weight and the mask."""
    r0 = tl.program_id(0) * 64
    c0 = tl.program_id(1) * 64
    rows = r0 + tl.arange(0, 64)
    cols = c0 + tl.arange(0, 64)
    gsum = tl.load(g_ptr + rows[:, None].to(tl.int64) * stride_gr + cols[None, :]).to(tl.float32)
    j0, j1 = _pruned_positions(_codes_tile(meta_ptr, r0, c0, c, 64))
    gi = tl.arange(0, 16)
    words = tl.load(pruned32_ptr + rows[:, None].to(tl.int64) * (c // 4) + c0 // 4 + gi[None, :])
    lo = _from_bits16(words & 0xFFFF, BF16) * alpha
    hi = _from_bits16((words >> 16) & 0xFFFF, BF16) * alpha
    d0 = tl.where(j0 == 0, lo, 0.0)
    d1 = tl.where(j0 == 1, lo, tl.where(j1 == 1, hi, 0.0))
    d2 = tl.where(j0 == 2, lo, tl.where(j1 == 2, hi, 0.0))
    d3 = tl.where(j1 == 3, hi, 0.0)
    dec = tl.reshape(tl.join(tl.join(d0, d2), tl.join(d1, d3)), (64, 64))  # element e = 2 * i + j
    tl.store(out_ptr + rows[:, None].to(tl.int64) * c + cols[None, :], gsum + dec)


def decay_cast_pruned(g: torch.Tensor, pruned: torch.Tensor, packed: torch.Tensor, alpha: float) -> torch.Tensor:
    """float32(g) + alpha * W*(~M) for g [r, c] (row-major, 16-bit), with W*(~M) given by the
    pruned values that :func:`repack_pair_values` wrote and the mask by ``packed``'s metadata."""
    r, c = g.shape
    out = torch.empty(r, c, dtype=torch.float32, device=g.device)
    _decay_cast_pruned_kernel[(r // 64, c // 64)](
        g,
        pruned.view(torch.int32),
        packed.view(-1).view(torch.int16)[r * c // 2 :],
        out,
        alpha,
        r,
        c,
        g.stride(0),
        BF16=g.dtype == torch.bfloat16,
        num_warps=PAIR_WARPS,
    )
    return out


# --------------------------------------------------------------------------------------------
# fused MVUE + pack on plain tiles (the fst weight-gradient operand, every backward)
# --------------------------------------------------------------------------------------------

# (tile columns, warps) by layout of A, the fastest bit-identical variants on the H100 after the
# kept-pair MVUE (results/tuning/h100_probe_pack_kernels_kept_pair.txt): A row-major (dH^T of the
# column-major fst FFN), A column-major (dY^T of a row-major dY: read along dY's rows, transposed
# in registers)
MVUE_TILE_ROW_MAJOR = (128, 4)
MVUE_TILE_COL_MAJOR = (64, 4)
# the same for the GELU backward fused with the pack (results/tuning/h100_probe_fused_gelu_kept_pair.txt)
ACT_MVUE_TILE_ROW_MAJOR = (64, 4)
ACT_MVUE_TILE_COL_MAJOR = (64, 4)


@triton.jit
def _mvue_pack_tile(
    x, rt, c0, m, k, out32_ptr, meta_ptr, seed_ptr, BK: tl.constexpr, BF16: tl.constexpr, EVEN_M: tl.constexpr
):
    """MVUE + pack of one fp32 tile ``x`` [64, BK] (rows rt*64.., columns c0.. of A [m, k]), 2:4
    along k: each group's four elements are split out of the tile with no reductions, and the
    kept pair, its code and the metadata words are formed directly. Same uniforms as
    ``kernels.ops.mvue`` (group g: component g % 4 of ``rand4x(seed, g // 4)``). ``EVEN_M``: m is
    a multiple of 64 (no row is masked)."""
    rows = rt * 64 + tl.arange(0, 64)
    valid = (rows[:, None] < m) | EVEN_M
    x4 = tl.reshape(x, (64, BK // 4, 2, 2))  # element e = 2 * i + j of each group
    xe, xo = tl.split(x4)
    x0, x2 = tl.split(xe)
    x1, x3 = tl.split(xo)
    quad = rows[:, None].to(tl.int64) * (k // 16) + c0 // 16 + tl.arange(0, BK // 16)[None, :]
    r0, r1, r2, r3 = tl.rand4x(tl.load(seed_ptr), quad)
    u = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (64, BK // 4))
    lo, hi, v_lo, v_hi = mvue_pair(x0, x1, x2, x3, u)
    g = c0 // 4 + tl.arange(0, BK // 4)
    vals = _bits16(v_lo, BF16) | (_bits16(v_hi, BF16) << 16)
    vptr = out32_ptr + rows[:, None].to(tl.int64) * (k // 4) + g[None, :]
    if EVEN_M:
        tl.store(vptr, vals)
        code = lo | (hi << 2)
    else:
        tl.store(vptr, vals, mask=valid)
        code = tl.where(valid, lo | (hi << 2), 14)  # rows past m: padding code
    # tile row = rb * 16 + h * 8 + rr, tile group = kb * 8 + gh * 4 + gq; nibble 2 * gh + h.
    # The four nibbles of a word are split out of a permuted tile (no sums over reshaped axes:
    # 0.03 ms less of 0.26 on the H100, results/tuning/h100_probe_mvue_variants.txt).
    c6 = tl.permute(tl.reshape(code, (4, 2, 8, BK // 32, 2, 4)), (0, 2, 3, 5, 1, 4))  # [rb, rr, kb, gq, h, gh]
    c_gh0, c_gh1 = tl.split(c6)
    c00, c10 = tl.split(c_gh0)  # (h, gh) = (0, 0), (1, 0)
    c01, c11 = tl.split(c_gh1)
    word = c00 | (c10 << 4) | (c01 << 8) | (c11 << 12)  # [rb, rr, kb, gq]
    rb = tl.arange(0, 4)[:, None, None, None]
    rr = tl.arange(0, 8)[None, :, None, None]
    kb = tl.arange(0, BK // 32)[None, None, :, None]
    gq = tl.arange(0, 4)[None, None, None, :]
    block = (rt * (k // 32) + c0 // 32 + kb) * 4 + rb
    tl.store(meta_ptr + block.to(tl.int64) * 32 + rr * 4 + gq, word.to(tl.int16))


@triton.jit
def _tile_offsets(m, stride_ar, stride_ac, BK: tl.constexpr, ROW_MAJOR: tl.constexpr, EVEN_M: tl.constexpr):
    """This program's tile of A [m, k] (given by strides): row tile ``rt``, first column ``c0``, and
    the offsets and in-bounds mask of its 64 x BK elements, laid out along A's contiguous axis:
    [64, BK] when A is row-major, [BK, 64] (to be transposed in registers) when its rows are."""
    return _tile_offsets_at(tl.program_id(0), m, stride_ar, stride_ac, BK, ROW_MAJOR, EVEN_M)


@triton.jit
def _tile_offsets_at(rt, m, stride_ar, stride_ac, BK: tl.constexpr, ROW_MAJOR: tl.constexpr, EVEN_M: tl.constexpr):
    """``_tile_offsets`` for row tile ``rt`` (column block: this program's)."""
    c0 = tl.program_id(1) * BK
    rows = rt * 64 + tl.arange(0, 64)
    cols = c0 + tl.arange(0, BK)
    if ROW_MAJOR:
        offs = rows[:, None].to(tl.int64) * stride_ar + cols[None, :].to(tl.int64) * stride_ac
        inb = (rows[:, None] < m) | EVEN_M
    else:
        offs = cols[:, None].to(tl.int64) * stride_ac + rows[None, :].to(tl.int64) * stride_ar
        inb = (rows[None, :] < m) | EVEN_M
    return rt, c0, offs, inb


@triton.jit
def _mvue_pack_kernel(
    a_ptr,
    out32_ptr,
    meta_ptr,
    seed_ptr,
    m,
    k,
    stride_ar,
    stride_ac,
    BK: tl.constexpr,
    ROW_MAJOR: tl.constexpr,
    BF16: tl.constexpr,
    EVEN_M: tl.constexpr,
):
    """Pack MVUE(A) 2:4 along k for A [m, k] given by strides (dY^T, dH^T: views of the gradient),
    64 rows x BK columns per program. The tile is read along A's contiguous axis (transposed in
    registers when that is the row axis)."""
    rt, c0, offs, inb = _tile_offsets(m, stride_ar, stride_ac, BK, ROW_MAJOR, EVEN_M)
    x = tl.load(a_ptr + offs, mask=inb, other=0.0).to(tl.float32)
    if not ROW_MAJOR:
        x = tl.trans(x)
    _mvue_pack_tile(x, rt, c0, m, k, out32_ptr, meta_ptr, seed_ptr, BK, BF16, EVEN_M)


def _mvue_launch(a: torch.Tensor, out: torch.Tensor, tiles_row_major: tuple, tiles_col_major: tuple) -> tuple:
    """Launch geometry shared by the MVUE pack kernels for the operand A = ``a`` [m, k] (any
    strides) packed into flat ``out``: grid, the values (as int32 pairs), the metadata, and the
    constexprs (tile columns and warps by A's layout; 32 columns where k is no multiple)."""
    m, k = a.shape
    flat16 = out.view(torch.int16)
    vals = m * k // 2
    row_major = a.stride(1) == 1
    bk, warps = tiles_row_major if row_major else tiles_col_major
    bk = bk if k % bk == 0 else 32
    kw = {"BK": bk, "ROW_MAJOR": row_major, "BF16": out.dtype == torch.bfloat16, "EVEN_M": m % 64 == 0}
    kw["num_warps"] = warps
    return (triton.cdiv(m, 64), k // bk), flat16[:vals].view(torch.int32), flat16[vals:], kw


def mvue_pack_into(a: torch.Tensor, seed: torch.Tensor, out: torch.Tensor) -> None:
    """Pack MVUE(a) along its rows (a [m, k], any strides, out's 16-bit dtype) into flat ``out``."""
    grid, vals32, meta, kw = _mvue_launch(a, out, MVUE_TILE_ROW_MAJOR, MVUE_TILE_COL_MAJOR)
    _mvue_pack_kernel[grid](a, vals32, meta, seed, *a.shape, a.stride(0), a.stride(1), **kw)


# --------------------------------------------------------------------------------------------
# activation backward fused with the MVUE pack of its result (the fst FFN's dH, every backward)
# --------------------------------------------------------------------------------------------


@triton.jit
def _store_and_pack(
    v,
    ptrs,
    inb,
    rt,
    c0,
    m,
    k,
    out32_ptr,
    meta_ptr,
    seed_ptr,
    BK: tl.constexpr,
    ROW_MAJOR: tl.constexpr,
    BF16: tl.constexpr,
    EVEN_M: tl.constexpr,
):
    """Store the fp32 tile ``v`` (laid out along A's contiguous axis, in bounds where ``inb``)
    rounded to the 16-bit dtype at ``ptrs``, and MVUE-pack what was stored as row tile ``rt`` of
    A [m, k]: the tail of every activation backward fused with the pack."""
    v16 = v.to(ptrs.dtype.element_ty)
    if EVEN_M:
        tl.store(ptrs, v16)
    else:
        tl.store(ptrs, v16, mask=inb)
    x = v16.to(tl.float32)
    if not ROW_MAJOR:
        x = tl.trans(x)
    _mvue_pack_tile(x, rt, c0, m, k, out32_ptr, meta_ptr, seed_ptr, BK, BF16, EVEN_M)


@triton.jit
def _act_bwd_mvue_pack_kernel(
    h_ptr,
    g_ptr,
    dh_ptr,
    out32_ptr,
    meta_ptr,
    seed_ptr,
    m,
    k,
    stride_ar,
    stride_ac,
    BK: tl.constexpr,
    ROW_MAJOR: tl.constexpr,
    ACT: tl.constexpr,
    BF16: tl.constexpr,
    EVEN_M: tl.constexpr,
):
    """dH = act'(H) * G, stored in H's layout, and packed MVUE(dH) 2:4 along k, in one pass.
    H, G and dH share strides; A = dH is [m, k] through them (dH^T of the activation's [T, n]
    input). Tiles as in ``_mvue_pack_kernel``; the MVUE reads dH as stored (rounded to the
    16-bit dtype), so the pack equals ``_mvue_pack_kernel`` run on the stored dH."""
    rt, c0, offs, inb = _tile_offsets(m, stride_ar, stride_ac, BK, ROW_MAJOR, EVEN_M)
    h = tl.load(h_ptr + offs, mask=inb, other=0.0).to(tl.float32)
    gr = tl.load(g_ptr + offs, mask=inb, other=0.0).to(tl.float32)
    _, dact = act_and_grad(h, ACT)
    _store_and_pack(
        gr * dact, dh_ptr + offs, inb, rt, c0, m, k, out32_ptr, meta_ptr, seed_ptr, BK, ROW_MAJOR, BF16, EVEN_M
    )


def act_bwd_mvue_pack_t_into(
    h: torch.Tensor, g: torch.Tensor, dh: torch.Tensor, act: int, seed: torch.Tensor, out: torch.Tensor
) -> None:
    """dh = act'(h) * g for [T, n] tensors of one layout (written into ``dh``), and packed
    MVUE(dh^T) along dh's rows (operand [n, T]) into flat ``out``: the fused form of the
    activation backward followed by :func:`pack_mvue_t_into`."""
    a = dh.t()
    grid, vals32, meta, kw = _mvue_launch(a, out, ACT_MVUE_TILE_ROW_MAJOR, ACT_MVUE_TILE_COL_MAJOR)
    _act_bwd_mvue_pack_kernel[grid](h, g, dh, vals32, meta, seed, *a.shape, a.stride(0), a.stride(1), ACT=act, **kw)


# --------------------------------------------------------------------------------------------
# gated activation backward fused with the MVUE pack of its result (GEGLU / SwiGLU fst FFN's dZ)
# --------------------------------------------------------------------------------------------

# the gated backward + pack: (tile columns, warps, split: a program packs one tile, gate or up,
# instead of both) by the layout of the operand A = dZ^T; fastest bit-checked configs on the H100
# (results/tuning/h100_probe_fused_gated.txt: 1.21-1.27x the two separate passes row-major,
# 1.06-1.08x column-major)
GATED_MVUE_TILE_ROW_MAJOR = (32, 4, False)
GATED_MVUE_TILE_COL_MAJOR = (64, 8, True)


@triton.jit
def _gated_bwd_mvue_pack_kernel(
    z_ptr,
    g_ptr,
    dz_ptr,
    out32_ptr,
    meta_ptr,
    seed_ptr,
    r_tiles,
    k,
    up_off,
    stride_zr,
    stride_zc,
    stride_gr,
    stride_gc,
    BK: tl.constexpr,
    ROW_MAJOR: tl.constexpr,
    ACT: tl.constexpr,
    BF16: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """dZ = [dout * up * act'(gate), dout * act(gate)] for Z = [gate, up] (A = dZ^T is [2r, k]
    through Z's strides, G = dout^T is [r, k] through its own; Z, dZ and G share an orientation),
    stored in Z's layout, and packed MVUE(dZ^T) 2:4 along k, in one pass. ``SPLIT``: program
    (2 i + h, c) computes and packs the tile i of half h (gate rows i*64.. or up rows r + i*64..)
    of one column block; the two programs of a pair run side by side, so the second one's reads
    of gate and dout mostly hit L2 (fewer registers per program than packing both tiles in one).
    Otherwise program (i, c) does both tiles. Rows are those of the whole operand, so the pack
    equals ``_mvue_pack_kernel`` run on the stored dZ. ``up_off``: from a gate element to its up
    element (r rows of A)."""
    m = 2 * r_tiles * 64
    if SPLIT:
        rt = tl.program_id(0) // 2
        half = tl.program_id(0) % 2
    else:
        rt = tl.program_id(0)
        half = 0
    rt, c0, offs, z_inb = _tile_offsets_at(rt, m, stride_zr, stride_zc, BK, ROW_MAJOR, True)
    g_rt, g_c0, goffs, g_inb = _tile_offsets_at(rt, r_tiles * 64, stride_gr, stride_gc, BK, ROW_MAJOR, True)
    gate = tl.load(z_ptr + offs).to(tl.float32)
    d = tl.load(g_ptr + goffs).to(tl.float32)
    if half == 0:
        u = tl.load(z_ptr + offs + up_off).to(tl.float32)
        act, dact = act_and_grad(gate, ACT)
        _store_and_pack(
            d * u * dact, dz_ptr + offs, z_inb, rt, c0, m, k, out32_ptr, meta_ptr, seed_ptr, BK, ROW_MAJOR, BF16, True
        )
        if not SPLIT:
            up, rt_up = dz_ptr + offs + up_off, rt + r_tiles
            _store_and_pack(
                d * act, up, z_inb, rt_up, c0, m, k, out32_ptr, meta_ptr, seed_ptr, BK, ROW_MAJOR, BF16, True
            )
    else:
        act_up, dact_up = act_and_grad(gate, ACT)
        up, rt_up = dz_ptr + offs + up_off, rt + r_tiles
        _store_and_pack(
            d * act_up, up, z_inb, rt_up, c0, m, k, out32_ptr, meta_ptr, seed_ptr, BK, ROW_MAJOR, BF16, True
        )


def gated_bwd_mvue_pack_t_into(
    z: torch.Tensor, g: torch.Tensor, dz: torch.Tensor, act: int, seed: torch.Tensor, out: torch.Tensor
) -> None:
    """dz = the gated backward of z [T, 2r] for the output gradient g [T, r] (z, g and dz of one
    orientation, row- or column-major; r % 64 == 0), written into ``dz``, and packed MVUE(dz^T)
    along dz's rows (operand [2r, T]) into flat ``out``."""
    a, ga = dz.t(), g.t()
    rows, cols = GATED_MVUE_TILE_ROW_MAJOR, GATED_MVUE_TILE_COL_MAJOR
    grid, vals32, meta, kw = _mvue_launch(a, out, rows[:2], cols[:2])
    del kw["EVEN_M"]  # always even: the two halves are whole 64-row tiles
    split = (rows if kw["ROW_MAJOR"] else cols)[2]
    r = ga.shape[0]
    _gated_bwd_mvue_pack_kernel[(grid[0] if split else grid[0] // 2, grid[1])](
        z, g, dz, vals32, meta, seed, r // 64, a.shape[1], r * a.stride(0),
        a.stride(0), a.stride(1), ga.stride(0), ga.stride(1), ACT=act, SPLIT=split, **kw,
    )  # fmt: skip
