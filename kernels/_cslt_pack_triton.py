"""Triton kernels of ``kernels.cslt_pack``: one program packs a 64x64 tile of a 2:4 operand
(values and metadata words, layout in ``kernels/cslt_pack.py``), and in pair mode also the same
tile transposed (the operand of the input-gradient GEMM), from one read of the weight."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TILE = 64


@triton.jit
def _pack_tile(bits, keep, row0, col0, m, k, out_ptr, err_ptr, CHECK: tl.constexpr, HAS_MASK: tl.constexpr):
    """bits [64, 64] int32 (16-bit patterns), keep [64, 64] int32 (or unused without a mask):
    write rows row0.. (global, of an [m, k] operand) and columns col0.. of the packed operand."""
    r = row0 + tl.arange(0, 64)
    valid = (r < m)[:, None]  # rows past m are padding (metadata only)
    b = tl.reshape(bits, (64, 16, 4))
    pos = tl.arange(0, 4)[None, None, :]
    if HAS_MASK:
        kp = tl.reshape(keep, (64, 16, 4)) != 0
        bad = tl.sum(kp.to(tl.int32), axis=2) != 2
    else:
        nz = ((b & 0x7FFF) != 0).to(tl.int32)  # -0.0 is a zero
        nzc = tl.sum(nz, axis=2)
        before = tl.cumsum(nz, axis=2) - nz  # nonzeros before each position
        kp = (nz != 0) | ((pos - before) < (2 - nzc)[:, :, None])  # fill with the first zeros
        bad = nzc > 2
    if CHECK:
        tl.atomic_add(err_ptr, tl.sum(tl.sum((bad & valid).to(tl.int32), axis=1), axis=0))
    i0 = tl.min(tl.where(kp, pos, 4), axis=2)  # [64, 16]
    i1 = tl.max(tl.where(kp, pos, -1), axis=2)
    v0 = tl.sum(tl.where(pos == i0[:, :, None], b, 0), axis=2)
    v1 = tl.sum(tl.where(pos == i1[:, :, None], b, 0), axis=2)
    vals = tl.reshape(tl.join(v0, v1), (64, 32))
    vcol = col0 // 2 + tl.arange(0, 32)
    tl.store(out_ptr + r.to(tl.int64)[:, None] * (k // 2) + vcol[None, :], vals.to(tl.int16), mask=valid)
    code = tl.where(valid, i0 | (i1 << 2), 14)
    c6 = tl.reshape(code, (4, 2, 8, 2, 2, 4))  # rows (rb, h, rr), groups (kb, gh, gq)
    h = tl.arange(0, 2)[None, :, None, None, None, None]
    gh = tl.arange(0, 2)[None, None, None, None, :, None]
    words = tl.sum(tl.sum(c6 << (4 * (2 * gh + h)), axis=4), axis=1)  # [rb, rr, kb, gq]
    rb = tl.arange(0, 4)[:, None, None, None]
    rr = tl.arange(0, 8)[None, :, None, None]
    kb = tl.arange(0, 2)[None, None, :, None]
    gq = tl.arange(0, 4)[None, None, None, :]
    rt = row0 // 64
    block = (rt * (k // 32) + col0 // 32 + kb) * 4 + rb
    addr = m.to(tl.int64) * (k // 2) + block.to(tl.int64) * 32 + rr * 4 + gq
    tl.store(out_ptr + addr, words.to(tl.int16))


@triton.jit
def _pack_kernel(
    a_ptr,
    keep_ptr,
    out_ptr,
    out_t_ptr,
    err_ptr,
    m,
    k,
    stride_a,
    HAS_MASK: tl.constexpr,
    PAIR: tl.constexpr,
    CHECK: tl.constexpr,
    SRC_F32: tl.constexpr,
    BF16: tl.constexpr,
):
    row0 = tl.program_id(0) * 64
    col0 = tl.program_id(1) * 64
    r = row0 + tl.arange(0, 64)
    c = col0 + tl.arange(0, 64)
    inb = (r < m)[:, None]
    offs = r.to(tl.int64)[:, None] * stride_a + c[None, :]
    if SRC_F32:  # fp32 master weight: round to the 16-bit type here (by hand for bf16, so that
        # the interpreter, which truncates fp32 -> bf16, matches the GPU's round-to-nearest-even)
        v = tl.load(a_ptr + offs, mask=inb, other=0.0)
        if BF16:
            u = v.to(tl.uint32, bitcast=True)
            bits = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).to(tl.int32)
            bits = tl.where(bits >= 32768, bits - 65536, bits)
        else:
            bits = v.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32)
    else:
        bits = tl.load(a_ptr + offs, mask=inb, other=0).to(tl.int32)
    if HAS_MASK:
        keep = tl.load(keep_ptr + r.to(tl.int64)[:, None] * k + c[None, :], mask=inb, other=0).to(tl.int32)
        bits = tl.where(keep != 0, bits, 0)
    else:
        keep = bits
    _pack_tile(bits, keep, row0, col0, m, k, out_ptr, err_ptr, CHECK, HAS_MASK)
    if PAIR:  # (W*M)^T is [k, m], 2:4 along m when the mask is transposable
        _pack_tile(tl.trans(bits), tl.trans(keep), col0, row0, k, m, out_t_ptr, err_ptr, CHECK, HAS_MASK)


def pack_into(
    a: torch.Tensor,
    mask: torch.Tensor | None,
    out: torch.Tensor,
    out_t: torch.Tensor | None,
    err: torch.Tensor | None,
) -> None:
    """Launch: ``a`` [m, k] contiguous (fp32, or the 16-bit dtype of ``out``); ``out`` (and
    ``out_t`` for the transposed operand) flat buffers of ``packed_numel``; ``err`` an int32
    counter of groups that are not 2:4 (None: no check)."""
    m, k = a.shape
    src_f32 = a.dtype == torch.float32
    if not src_f32 and a.dtype != out.dtype:
        a = a.to(out.dtype)
    src = a if src_f32 else a.view(torch.int16)
    keep = mask.view(torch.int8) if mask is not None else src
    grid = (triton.cdiv(m, TILE), k // TILE)
    _pack_kernel[grid](
        src,
        keep,
        out.view(torch.int16),
        (out_t if out_t is not None else out).view(torch.int16),
        err if err is not None else out,
        m,
        k,
        a.stride(0),
        HAS_MASK=mask is not None,
        PAIR=out_t is not None,
        CHECK=err is not None,
        SRC_F32=src_f32,
        BF16=out.dtype == torch.bfloat16,
        num_warps=4,
    )
