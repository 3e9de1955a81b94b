"""Triton kernel of ``kernels.cslt_pack``: one program packs 64 rows x 32*KB columns of a 2:4
operand (layout in ``kernels/cslt_pack.py``).

The tile is loaded straight into the shape of the metadata, [32 word rows, 4*KB word columns,
4 contributors, 4 elements]: a metadata word (row block rb, row rr, chunk kb, group gq) holds the
codes of 4 groups of 4 elements (rows rr and rr+8, groups gq and gq+4), so every reduction (the
kept positions of a group, then the word) runs along axes that the kernel never reshapes. The two
kept values of a group are stored as one 32-bit word (they are adjacent in the output). Strides
are arguments, so the transposed operand (W*M)^T is packed from a strided view of W, no copy."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.mvue import _mvue_group

ROWS = 64
# Transposed views are read with strided loads. A coalesced [cols, rows] load permuted in the kernel
# was 8% faster for the weight pair at 4 warps on the H100 (triton 3.6) but gave wrong results at
# 8 and 16 warps and ran at 47 GB/s for the fused MVUE (results/tuning/h100_probe_pack.txt), so it
# was removed. Strided loads are right at every warp count tried; 4 warps is the fastest.
NUM_WARPS = 4
# The fused MVUE pack of an operand whose rows are contiguous (dH^T of the column-major fst FFN)
# holds more fp32 temporaries per element: 8 warps ran it 23% faster than 4 on the H100
# (scripts/gpu_sweep_mvue_pack.py, bit-identical output); strided MVUE reads stay at 4 (8: 3x slower).
NUM_WARPS_MVUE_ROWS = 8


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
def _pick(e, v0, v1, v2, v3):
    """[..., 4] tensor from four [...] tensors (element e of each group)."""
    return tl.where(
        e == 0,
        v0[:, :, :, None],
        tl.where(e == 1, v1[:, :, :, None], tl.where(e == 2, v2[:, :, :, None], v3[:, :, :, None])),
    )


@triton.jit
def _quad_uniforms(seed, rt, c0, k, KB: tl.constexpr):
    """``kernels.mvue.group_uniform`` of every group of the tile, as a [32, 4KB, 4] tensor laid
    out like ``group3`` below, with one Philox call per four consecutive groups: the tile's word
    column wc = kb * 4 + gq puts groups 4q .. 4q+3 of a row at gq = 0..3 (k % 16 == 0, so a row
    starts a quad)."""
    wr = tl.arange(0, 32)[:, None, None]
    kb = tl.arange(0, KB)[None, :, None]
    cc = tl.arange(0, 4)[None, None, :]
    row = rt * 64 + (wr // 8) * 16 + (cc % 2) * 8 + wr % 8  # [32, 1, 4]
    quad = (row.to(tl.int64) * (k // 4) + c0 // 4 + kb * 8 + (cc // 2) * 4) // 4  # [32, KB, 4]
    r0, r1, r2, r3 = tl.rand4x(seed, quad)
    u = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (32, KB, 4, 4))  # [.., cc, gq]
    return tl.reshape(tl.permute(u, (0, 1, 3, 2)), (32, 4 * KB, 4))  # [.., kb * 4 + gq, cc]


@triton.jit
def _pack_kernel(
    a_ptr,
    keep_ptr,
    out32_ptr,
    meta_ptr,
    err_ptr,
    seed_ptr,
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
    MVUE: tl.constexpr,
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
    if MVUE:  # the operand is MVUE(a) along k (a: e.g. dY^T, a strided view), drawn here
        x = tl.load(a_ptr + offs, mask=ld_mask, other=0.0).to(tl.float32)
        x0 = tl.sum(tl.where(e == 0, x, 0.0), axis=3)
        x1 = tl.sum(tl.where(e == 1, x, 0.0), axis=3)
        x2 = tl.sum(tl.where(e == 2, x, 0.0), axis=3)
        x3 = tl.sum(tl.where(e == 3, x, 0.0), axis=3)
        u = _quad_uniforms(tl.load(seed_ptr), rt, c0, k, KB)  # kernels.mvue's draws
        o0, o1, o2, o3, k0, k1, k2, k3 = _mvue_group(x0, x1, x2, x3, u)
        bits = _bits16(_pick(e, o0, o1, o2, o3), BF16)
        kp = _pick(e, k0.to(tl.int32), k1.to(tl.int32), k2.to(tl.int32), k3.to(tl.int32)) != 0
        bad = tl.sum(kp.to(tl.int32), axis=3) != 2
    else:
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
    seed: torch.Tensor | None = None,
) -> None:
    """Pack ``a`` (any strides; fp32 or the 16-bit dtype of ``out``) into the flat ``out``; with
    ``seed`` (int64 device tensor) pack MVUE(a) along its rows instead (a in out's dtype)."""
    m, k = a.shape
    src_f32 = a.dtype == torch.float32
    if not src_f32 and a.dtype != out.dtype:
        a = a.to(out.dtype)
    src = a if src_f32 or seed is not None else a.view(torch.int16)
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
        seed if seed is not None else flat16,
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
        MVUE=seed is not None,
        num_warps=NUM_WARPS_MVUE_ROWS if seed is not None and src.stride(1) == 1 else NUM_WARPS,
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
    _launch(x.t(), None, out, None, seed)


# --------------------------------------------------------------------------------------------
# values-only refresh of a packed pair (the per-step path of a transposable 2:4 layer)
# --------------------------------------------------------------------------------------------

# Tile of W per program of the values-only pair refresh; 4 warps. BLOCK_C falls back to 64 when
# the column count is not a multiple of 128.
PAIR_ROWS = 64
PAIR_COLS = 128
PAIR_WARPS = 4


@triton.jit
def _repack_pair_values_kernel(
    w_ptr,
    meta_ptr,
    out32_ptr,
    out_t32_ptr,
    r,
    c,
    stride_wr,
    BR: tl.constexpr,
    BC: tl.constexpr,
    SRC_F32: tl.constexpr,
    BF16: tl.constexpr,
):
    """Rewrite the kept values of pack(W*M) [r, c] and pack((W*M)^T) [c, r] from one coalesced
    read of W, the kept positions decoded from the metadata already in pack(W*M) (so values and
    metadata cannot disagree; the metadata itself is written only when the mask changes)."""
    r0 = tl.program_id(0) * BR
    c0 = tl.program_id(1) * BC
    rows = r0 + tl.arange(0, BR)
    cols = c0 + tl.arange(0, BC)
    offs = rows[:, None].to(tl.int64) * stride_wr + cols[None, :]
    if SRC_F32:  # noqa: SIM108 (a constexpr branch of a Triton kernel)
        bits = _bits16(tl.load(w_ptr + offs), BF16)
    else:
        bits = tl.load(w_ptr + offs).to(tl.int32) & 0xFFFF
    # the 4-bit code of every row group (layout in kernels/cslt_pack.py): word (r % 8) * 4 + g % 4
    # of block ((r // 64) * (c // 32) + g // 8) * 4 + (r % 64) // 16, nibble 2 * ((g % 8) // 4) + (r % 16) // 8
    g = c0 // 4 + tl.arange(0, BC // 4)
    rr = rows[:, None]
    gg = g[None, :]
    block = ((rr // 64) * (c // 32) + gg // 8) * 4 + (rr % 64) // 16
    addr = block.to(tl.int64) * 32 + (rr % 8) * 4 + gg % 4
    word = tl.load(meta_ptr + addr).to(tl.int32) & 0xFFFF
    code = (word >> (4 * (2 * ((gg % 8) // 4) + (rr % 16) // 8))) & 0xF  # [BR, BC/4]
    i0 = (code & 3)[:, :, None]
    i1 = (code >> 2)[:, :, None]
    e = tl.arange(0, 4)[None, None, :]
    b3 = tl.reshape(bits, (BR, BC // 4, 4))
    v0 = tl.sum(tl.where(e == i0, b3, 0), axis=2)
    v1 = tl.sum(tl.where(e == i1, b3, 0), axis=2)
    tl.store(out32_ptr + rr.to(tl.int64) * (c // 4) + gg, v0 | (v1 << 16))
    # (W*M)^T: groups of 4 rows of one column; a transposable mask keeps 2 of each
    kp = tl.reshape((e == i0) | (e == i1), (BR // 4, 4, BC))
    f = tl.arange(0, 4)[None, :, None]
    j0 = tl.min(tl.where(kp, f, 4), axis=1)[:, None, :]
    j1 = tl.max(tl.where(kp, f, -1), axis=1)[:, None, :]
    bt = tl.reshape(bits, (BR // 4, 4, BC))
    w0 = tl.sum(tl.where(f == j0, bt, 0), axis=1)  # [BR/4, BC]
    w1 = tl.sum(tl.where(f == j1, bt, 0), axis=1)
    q = r0 // 4 + tl.arange(0, BR // 4)
    tl.store(out_t32_ptr + cols[None, :].to(tl.int64) * (r // 4) + q[:, None], w0 | (w1 << 16))


def repack_pair_values(w: torch.Tensor, out: torch.Tensor, out_t: torch.Tensor) -> None:
    """Overwrite the values of the packed pair ``out`` (pack(W*M), flat) and ``out_t``
    (pack((W*M)^T), flat) with those of ``w`` [r, c] (row-major; fp32 or their 16-bit dtype),
    keeping their metadata, i.e. their mask."""
    r, c = w.shape
    src_f32 = w.dtype == torch.float32
    src = w if src_f32 else w.view(torch.int16)
    flat16, flat16_t = out.view(torch.int16), out_t.view(torch.int16)
    vals = r * c // 2
    bc = PAIR_COLS if c % PAIR_COLS == 0 else 64
    grid = (r // PAIR_ROWS, c // bc)
    _repack_pair_values_kernel[grid](
        src,
        flat16[vals:],
        flat16[:vals].view(torch.int32),
        flat16_t[:vals].view(torch.int32),
        r,
        c,
        src.stride(0),
        BR=PAIR_ROWS,
        BC=bc,
        SRC_F32=src_f32,
        BF16=out.dtype == torch.bfloat16,
        num_warps=PAIR_WARPS,
    )
