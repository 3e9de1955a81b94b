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
