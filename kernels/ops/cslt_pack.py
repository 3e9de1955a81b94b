"""Pack a 2:4 operand for cuSPARSELt ourselves, instead of ``torch._cslt_compress``.

Why: in 2:4 training every GEMM operand that is sparse changes every step (the weight after each
optimizer step, the MVUE'd output gradient every backward), so it is packed every step. On an H100
``torch._cslt_compress`` takes 0.48 ms for an 8192x2048 bf16 operand (a memory-bound job of ~50 us)
and made 2:4 FFN training steps slower than dense (results/tuning/h100_probe_compress.txt).

The layout (cuSPARSELt 0.8 through torch 2.11, 16-bit types, a row-major operand A [m, k], 2:4
along k; read off ``_cslt_compress`` outputs with ``scripts/probes/gpu_probe_cslt_layout.py``):

* values: the two kept entries of every group of 4, row-major, ``m x k/2`` elements;
* then metadata, 4 bits per group: ``code = i0 | i1 << 2`` (positions ``i0 < i1`` of the kept
  entries). Rows are padded to a multiple of 64 (padding groups hold code 14). The metadata is a
  sequence of 16-bit words in blocks of 16 rows x 32 columns (8 groups, 32 words); blocks run over
  row blocks of 16 inside a 64-row tile, then over 32-column chunks, then over 64-row tiles. In a
  block, word ``(r % 8) * 4 + g % 4`` holds the groups ``g`` and ``g + 4`` of rows ``r`` and
  ``r + 8``, at nibble ``2 * (g // 4) + r // 8`` (rows r < 8 of the block, groups g < 4).

Nothing guarantees that layout across cuSPARSELt versions, so before the first use on a device and
dtype our packing is compared bit for bit with ``torch._cslt_compress`` (:func:`layout_matches`);
if it differs, callers fall back to ``_cslt_compress`` with a warning. The Triton kernels
(``kernels/ops/_cslt_pack_triton.py``) write the values and the metadata in one pass, and
:func:`cslt_pack_pair` packs ``W*M`` and ``(W*M)^T`` from one read of ``W`` (the forward and the
input-gradient operands of a transposable 2:4 layer); :func:`cslt_repack_pair_values` rewrites
only the kept values of such a pair from the updated weight (the per-step job while the mask
holds), :func:`cslt_pack_pair_into` repacks it in place when the mask changes. :func:`cslt_pack_reference` is the same
layout in plain PyTorch; :func:`cslt_unpack_reference` inverts it (tests; documentation).
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from kernels.ops.common import check_tensor, use_triton

PACK_DTYPES = (torch.float16, torch.bfloat16)
ROW_TILE = 64
PAD_CODE = 14  # what cuSPARSELt writes for the padding rows' groups
_LAYOUT_OK: dict[tuple, bool] = {}


def packed_numel(m: int, k: int) -> int:
    """Elements (of the 16-bit dtype) of a packed [m, k] operand: values plus metadata words."""
    m_pad = -(-m // ROW_TILE) * ROW_TILE
    return m * k // 2 + m_pad * k // 16


def packed_alloc(m: int, k: int) -> int:
    """Elements to allocate: ``torch._cslt_sparse_mm`` wants a 2-D [m, cols] operand, and
    ``torch._cslt_compress`` rounds the packed size up to whole rows (the slack is never read)."""
    return m * -(-packed_numel(m, k) // m)


def _packed_view(flat: torch.Tensor, m: int) -> torch.Tensor:
    """The shape ``torch._cslt_compress`` returns: [m, ceil(packed_numel / m)]."""
    return flat.view(m, -1)


def _check(
    a: object, mask: object, dtype: torch.dtype | None, name: str = "a"
) -> tuple[torch.Tensor, torch.Tensor | None, torch.dtype]:
    a = check_tensor(name, a, ndim=2, finite=False)
    m, k = a.shape
    if m % 32 or k % 64:
        raise ValueError(f"{name} is {m}x{k}: packing for cuSPARSELt needs rows % 32 == 0 and cols % 64 == 0")
    out_dtype = a.dtype if dtype is None else dtype
    if out_dtype not in PACK_DTYPES:
        raise TypeError(f"packed dtype must be float16 or bfloat16, got {out_dtype}")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError("mask must be a bool tensor")
        mask = mask.contiguous()
        if mask.shape != a.shape or mask.device != a.device:
            raise ValueError(
                f"mask {tuple(mask.shape)} on {mask.device} must match {name} {tuple(a.shape)} on {a.device}"
            )
    return a, mask, out_dtype


# --------------------------------------------------------------------------------------------
# plain-PyTorch reference
# --------------------------------------------------------------------------------------------


def _keep_from_values(a16: torch.Tensor) -> torch.Tensor:
    """Kept positions when no mask is given: the nonzeros, filled up to two per group with the
    first zero positions (their value is 0, so any choice gives the same products)."""
    m, k = a16.shape
    nz = (a16.view(torch.int16) & 0x7FFF) != 0  # -0.0 counts as zero
    g = nz.reshape(m, k // 4, 4)
    if bool((g.sum(-1) > 2).any()):
        raise ValueError("operand is not 2:4: a group of 4 holds more than 2 nonzeros")
    pos = torch.arange(4, device=a16.device)
    key = (~g).long() * 4 + pos  # nonzeros first, then by position
    rank = (key.unsqueeze(-1) > key.unsqueeze(-2)).sum(-1)
    return (rank < 2).reshape(m, k)


def cslt_pack_reference(
    a: torch.Tensor, mask: torch.Tensor | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``a`` (times ``mask``) in cuSPARSELt's packed layout, in plain PyTorch (see module doc)."""
    a, mask, dt = _check(a, mask, dtype)
    m, k = a.shape
    a16 = a.to(dt)
    keep = _keep_from_values(a16) if mask is None else mask
    groups = keep.reshape(m, k // 4, 4)
    if bool((groups.sum(-1) != 2).any()):
        raise ValueError("mask is not 2:4: a group of 4 does not keep exactly 2 entries")
    values = a16.view(torch.int16)[keep].reshape(m, k // 2)
    pos = torch.arange(4, device=a.device)
    i0 = torch.where(groups, pos, 4).amin(-1)
    i1 = torch.where(groups, pos, -1).amax(-1)
    code = (i0 | (i1 << 2)).to(torch.int32)
    m_pad = -(-m // ROW_TILE) * ROW_TILE
    if m_pad != m:
        code = torch.cat([code, torch.full((m_pad - m, k // 4), PAD_CODE, dtype=torch.int32, device=a.device)])
    # rows r = ((rt*4 + rb)*2 + h)*8 + rr, groups G = (kb*2 + gh)*4 + gq
    c = code.reshape(m_pad // 64, 4, 2, 8, k // 32, 2, 4)
    h = torch.arange(2, device=a.device).view(1, 1, 2, 1, 1, 1, 1)
    gh = torch.arange(2, device=a.device).view(1, 1, 1, 1, 1, 2, 1)
    words = (c << (4 * (2 * gh + h))).sum((2, 5))  # [rt, rb, rr, kb, gq]
    words = words.permute(0, 3, 1, 2, 4).reshape(-1)  # blocks over rb, then kb, then rt
    words = torch.where(words >= 1 << 15, words - (1 << 16), words).to(torch.int16)
    slack = packed_alloc(m, k) - packed_numel(m, k)
    flat = torch.cat([values.reshape(-1), words, words.new_zeros(slack)]).view(dt)
    return _packed_view(flat, m)


def _flat_bits(packed: torch.Tensor, m: int, k: int) -> torch.Tensor:
    flat = packed.reshape(-1).view(torch.int16)
    if flat.numel() not in (packed_numel(m, k), packed_alloc(m, k)):
        raise ValueError(f"packed tensor has {flat.numel()} elements; an {m}x{k} operand packs to {packed_alloc(m, k)}")
    return flat[: packed_numel(m, k)]


def _codes_reference(flat: torch.Tensor, m: int, k: int) -> torch.Tensor:
    """The 4-bit code (i0 | i1 << 2) of every group, [m, k/4] int32, read off the metadata."""
    m_pad = -(-m // ROW_TILE) * ROW_TILE
    words = flat[m * k // 2 :].to(torch.int32) & 0xFFFF
    words = words.reshape(m_pad // 64, k // 32, 4, 8, 4).permute(0, 2, 3, 1, 4)  # [rt, rb, rr, kb, gq]
    h = torch.arange(2, device=flat.device).view(1, 1, 2, 1, 1, 1, 1)
    gh = torch.arange(2, device=flat.device).view(1, 1, 1, 1, 1, 2, 1)
    code = (words.reshape(m_pad // 64, 4, 1, 8, k // 32, 1, 4) >> (4 * (2 * gh + h))) & 0xF
    return code.reshape(m_pad, k // 4)[:m]


def cslt_keep_mask_reference(packed: torch.Tensor, m: int, k: int) -> torch.Tensor:
    """The bool [m, k] mask of kept positions that a packed operand's metadata encodes."""
    code = _codes_reference(_flat_bits(packed, m, k), m, k)
    pos = torch.arange(4, device=packed.device)
    keep = (pos == (code & 3)[..., None]) | (pos == (code >> 2)[..., None])
    return keep.reshape(m, k)


def cslt_unpack_reference(packed: torch.Tensor, m: int, k: int) -> torch.Tensor:
    """The dense [m, k] operand that a packed tensor stands for (inverse of the layout)."""
    flat = _flat_bits(packed, m, k)
    values = flat[: m * k // 2].reshape(m, k // 4, 2)
    code = _codes_reference(flat, m, k)
    dense = torch.zeros(m, k // 4, 4, dtype=torch.int16, device=flat.device)
    dense.scatter_(-1, (code & 3).long().unsqueeze(-1), values[..., :1])
    dense.scatter_(-1, (code >> 2).long().unsqueeze(-1), values[..., 1:])
    return dense.reshape(m, k).view(packed.dtype)


# --------------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------------


def _alloc(m: int, k: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Flat output of ``packed_alloc`` elements, the slack after the metadata zeroed."""
    out = torch.empty(packed_alloc(m, k), dtype=dtype, device=device)
    if out.numel() > packed_numel(m, k):
        out[packed_numel(m, k) :].zero_()
    return out


def _raise_if_bad(err: torch.Tensor | None) -> None:
    if err is not None and int(err.item()):
        raise ValueError(f"operand is not 2:4: {int(err.item())} group(s) of 4 do not keep exactly 2 entries")


def cslt_pack(
    a: torch.Tensor, mask: torch.Tensor | None = None, *, dtype: torch.dtype | None = None, check: bool = True
) -> torch.Tensor:
    """Pack ``a`` [m, k] (times ``mask``; 2:4 along k) for ``torch._cslt_sparse_mm``, cast to
    ``dtype`` (default: a's, fp16/bf16). Without a mask the nonzeros of ``a`` are kept (at most 2
    per group of 4). ``check=True`` syncs once to raise when the operand is not 2:4; ``False``
    skips that (graph capture; the caller guarantees the pattern)."""
    a, mask, dt = _check(a, mask, dtype)
    if not use_triton(a):
        return cslt_pack_reference(a, mask, dt)
    from kernels.ops._cslt_pack_triton import pack_into

    m, k = a.shape
    out = _alloc(m, k, dt, a.device)
    err = torch.zeros(1, dtype=torch.int32, device=a.device) if check else None
    pack_into(a.contiguous(), mask, out, None, err)
    _raise_if_bad(err)
    return _packed_view(out, m)


def cslt_pack_pair(
    w: torch.Tensor, mask: torch.Tensor, *, dtype: torch.dtype | None = None, check: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """(pack(W*M), pack((W*M)^T)) from one read of ``w`` [r, c]: the operands of the forward and
    input-gradient GEMMs of a layer whose mask is 2:4 along both axes (transposable). Needs
    r % 64 == 0 and c % 64 == 0."""
    w, mask, dt = _check(w, mask, dtype, "w")
    if mask is None:
        raise TypeError("cslt_pack_pair needs the transposable mask")
    r, c = w.shape
    if r % 64:
        raise ValueError(f"w is {r}x{c}: the pair packing needs rows % 64 == 0 (its transpose is packed too)")
    if not use_triton(w):
        return cslt_pack_reference(w, mask, dt), cslt_pack_reference(w.t(), mask.t(), dt)
    from kernels.ops._cslt_pack_triton import pack_into

    out, out_t = _alloc(r, c, dt, w.device), _alloc(c, r, dt, w.device)
    err = torch.zeros(1, dtype=torch.int32, device=w.device) if check else None
    pack_into(w.contiguous(), mask, out, out_t, err)
    _raise_if_bad(err)
    return _packed_view(out, r), _packed_view(out_t, c)


def _check_pair_buffers(w: torch.Tensor, packed: object, packed_t: object) -> tuple[torch.dtype, int, int]:
    r, c = w.shape
    if r % 64 or c % 64:
        raise ValueError(f"w is {r}x{c}: a packed pair needs rows % 64 == 0 and cols % 64 == 0")
    for name, p, (m, k) in (("packed", packed, (r, c)), ("packed_t", packed_t, (c, r))):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(p).__name__}")
        if (
            p.dtype not in PACK_DTYPES
            or not p.is_contiguous()
            or p.dim() != 2
            or p.shape[0] != m
            or p.numel() != packed_alloc(m, k)
        ):
            raise ValueError(
                f"{name} must be a contiguous fp16/bf16 packed {m}x{k} operand ([{m}, {packed_alloc(m, k) // m}]), "
                f"got {p.dtype} {tuple(p.shape)}"
            )
        if p.device != w.device:
            raise ValueError(f"{name} is on {p.device} but w is on {w.device}")
    if packed.dtype != packed_t.dtype:
        raise ValueError(f"packed ({packed.dtype}) and packed_t ({packed_t.dtype}) must have one dtype")
    return packed.dtype, r, c


def cslt_pack_pair_into(
    w: torch.Tensor, mask: torch.Tensor, packed: torch.Tensor, packed_t: torch.Tensor, *, check: bool = True
) -> None:
    """:func:`cslt_pack_pair` written in place into existing buffers (values and metadata), so
    that CUDA graphs holding those buffers see a new mask."""
    w = check_tensor("w", w, ndim=2, finite=False)
    dt, r, c = _check_pair_buffers(w, packed, packed_t)
    w, mask, _ = _check(w, mask, dt, "w")
    if mask is None:
        raise TypeError("cslt_pack_pair_into needs the transposable mask")
    if not use_triton(w):
        p, pt = cslt_pack_pair(w, mask, dtype=dt, check=check)
        packed.copy_(p.view(packed.shape))
        packed_t.copy_(pt.view(packed_t.shape))
        return
    from kernels.ops._cslt_pack_triton import pack_into

    err = torch.zeros(1, dtype=torch.int32, device=w.device) if check else None
    pack_into(w.contiguous(), mask, packed.view(-1), packed_t.view(-1), err)
    _raise_if_bad(err)


def cslt_repack_pair_values(
    w: torch.Tensor, packed: torch.Tensor, packed_t: torch.Tensor, pruned: torch.Tensor | None = None
) -> None:
    """Per-step refresh of a transposable layer's packed pair: overwrite the kept values of
    ``packed`` (pack(W*M), from :func:`cslt_pack_pair`) and ``packed_t`` (pack((W*M)^T)) with
    those of the updated ``w`` [r, c] (fp32 or the pair's dtype), keeping the metadata, i.e. the
    mask M. One coalesced read of ``w`` and no mask read (the kept positions come from
    ``packed``'s metadata): about half the memory traffic of packing afresh, which the weight
    needs only when its mask changes. Bit-identical to ``cslt_pack_pair(w, M)``. No checks of
    values (graph-safe); the pair must hold a transposable mask (as ``cslt_pack_pair`` writes).

    ``pruned`` (optional, [r, c / 2] of the pair's dtype): also receives the pruned entries of
    ``w`` (rounded to that dtype), two per group of 4 in position order, in the same pass; what
    :func:`cslt_decay_cast_pruned` reads."""
    w = check_tensor("w", w, ndim=2, finite=False)
    dt, r, c = _check_pair_buffers(w, packed, packed_t)
    if w.dtype not in (torch.float32, dt):
        raise TypeError(f"w must be float32 or the pair's dtype {dt}, got {w.dtype}")
    if pruned is not None:
        check_tensor("pruned", pruned, dtypes=(dt,), finite=False)
        if pruned.shape != (r, c // 2) or not pruned.is_contiguous() or pruned.device != w.device:
            raise ValueError(f"pruned must be a contiguous [{r}, {c // 2}] tensor on {w.device}")
    if not use_triton(w):
        keep = cslt_keep_mask_reference(packed, r, c)
        p, pt = cslt_pack_pair(w, keep, dtype=dt, check=False)
        packed.copy_(p.view(packed.shape))
        packed_t.copy_(pt.view(packed_t.shape))
        if pruned is not None:
            pruned.copy_(pruned_values_reference(w, keep, dt))
        return
    from kernels.ops._cslt_pack_triton import repack_pair_values

    repack_pair_values(w.contiguous(), packed.view(-1), packed_t.view(-1), pruned)


def pruned_values_reference(w: torch.Tensor, keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The entries of ``w`` [r, c] that the 2:4 mask ``keep`` prunes, rounded to ``dtype``: [r, c / 2],
    two per group in position order."""
    r, c = w.shape
    return w.to(dtype)[~keep].view(r, c // 2)


def cslt_decay_cast_pruned(g: torch.Tensor, pruned: torch.Tensor, packed: torch.Tensor, alpha: float) -> torch.Tensor:
    """Masked decay and cast of a weight gradient in one pass: ``float32(g) + alpha * W*(~M)``
    for the 16-bit gradient ``g`` [r, c] of a transposable 2:4 layer, where W*(~M) comes from
    ``pruned`` (:func:`cslt_repack_pair_values` of this step's weight) and M from the metadata
    of ``packed`` (pack(W*M) of the same pair). Reads 2 + 1 + 1/8 bytes per weight entry instead
    of 2 + 4 + 1 for ``grad + alpha * W*(~M)`` from the fp32 weight and a bool mask; the decay
    uses W rounded to the 16-bit dtype (relative error <= 2^-9 of a term that is alpha times
    the weight). No value checks (graph-safe)."""
    g = check_tensor("g", g, dtypes=PACK_DTYPES, ndim=2, finite=False)
    r, c = g.shape
    if r % 64 or c % 64 or not g.is_contiguous():
        raise ValueError(f"g must be a contiguous [r, c] tensor with r % 64 == c % 64 == 0, got {tuple(g.shape)}")
    if pruned.dtype != g.dtype or pruned.shape != (r, c // 2) or not pruned.is_contiguous():
        raise ValueError(f"pruned must be a contiguous [{r}, {c // 2}] {g.dtype} tensor")
    if packed.dtype != g.dtype or packed.numel() < packed_numel(r, c):
        raise ValueError(f"packed must be pack(W*M) of a [{r}, {c}] {g.dtype} weight")
    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
    if not use_triton(g):
        keep = cslt_keep_mask_reference(packed, r, c)
        dec = torch.zeros(r, c, dtype=torch.float32, device=g.device)
        dec[~keep] = pruned.float().reshape(-1)
        return g.float() + float(alpha) * dec
    from kernels.ops._cslt_pack_triton import decay_cast_pruned

    return decay_cast_pruned(g, pruned, packed, float(alpha))


def cslt_pack_mvue_t(x: torch.Tensor, seed_tensor: torch.Tensor) -> torch.Tensor:
    """Packed MVUE(x^T) 2:4 along x's rows, in one pass over ``x`` [T, n] (fp16/bf16): the
    weight-gradient operand of fully sparse training, MVUE(dY^T) [n, T], with no transposed copy
    and no unpacked intermediate. Draws the uniforms of ``kernels.ops.mvue.mvue24_nocheck(x.t(),
    seed_tensor=...)`` (the seed tensor is read on the device and then incremented), so the
    result equals ``cslt_pack(that, its keep-mask)`` bit for bit (the interpreter, and the
    compiled kernels at every shape tested) except at rounding ties: where a group's sampling
    point lies within 1 ulp of a threshold the two compiled kernels may keep different pairs
    (1 group of 16.7M at 8192x8192 on an H100, results/tuning/h100_debug_mvue_square.txt); both
    are draws of the same unbiased estimator. No value checks (graph-safe):
    the caller guarantees what ``mvue24_nocheck`` asks (finite x, 2 * max|x| within the dtype)."""
    from kernels.ops.mvue import check_seed_tensor, mvue24_nocheck

    x = check_tensor("x", x, dtypes=PACK_DTYPES, ndim=2, finite=False)
    t, n = x.shape
    if n % 32 or t % 64:
        raise ValueError(f"x is {t}x{n}: packing MVUE(x^T) needs n % 32 == 0 and T % 64 == 0")
    check_seed_tensor(seed_tensor, x)
    if not use_triton(x):
        keep = torch.empty(n, t, dtype=torch.bool, device=x.device)
        g = mvue24_nocheck(x.t().contiguous(), -1, seed_tensor=seed_tensor, mask_out=keep)
        return cslt_pack_reference(g, keep)
    from kernels.ops._cslt_pack_triton import pack_mvue_t_into

    out = _alloc(n, t, x.dtype, x.device)
    pack_mvue_t_into(x, seed_tensor, out)
    seed_tensor.add_(1)  # on the device, as mvue24_nocheck does
    return _packed_view(out, n)


GELU_APPROXIMATIONS = ("none", "tanh")


def gelu_backward_reference(h: torch.Tensor, g: torch.Tensor, approximate: str = "tanh") -> torch.Tensor:
    """GELU'(h) * g in float32, rounded to h's dtype, in h's layout (what the fused kernel stores)."""
    dh = torch.ops.aten.gelu_backward(g.float(), h.float(), approximate=approximate)
    return torch.empty_like(h).copy_(dh)


def cslt_gelu_backward_mvue_pack_t(
    h: torch.Tensor, g: torch.Tensor, seed_tensor: torch.Tensor, approximate: str = "tanh"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GELU backward ``dh = GELU'(h) * g`` and the packed MVUE(dh^T), in one pass.

    ``h`` (the GELU input) and ``g`` (the gradient of its output) are [T, n] fp16/bf16 tensors of
    one layout, row- or column-major; ``dh`` comes back in that layout, and the packed operand is
    what ``cslt_pack_mvue_t(dh, seed_tensor)`` returns for that ``dh`` (same uniforms; the seed
    tensor is read on the device and then incremented). Why: in the fst FFN, dH is the output
    gradient of the first linear, whose weight-gradient GEMM needs MVUE(dH^T) packed; fusing saves
    the pack a full read of dH. No value checks (graph-safe; the caller guarantees what
    ``cslt_pack_mvue_t`` asks). Where Triton does not run: the reference backward, then
    ``cslt_pack_mvue_t``."""
    from kernels.ops.mvue import check_seed_tensor

    if not isinstance(approximate, str) or approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")
    h = check_tensor("h", h, dtypes=PACK_DTYPES, ndim=2, finite=False)
    g = check_tensor("g", g, dtypes=(h.dtype,), ndim=2, finite=False)
    if g.shape != h.shape:
        raise ValueError(f"g has shape {tuple(g.shape)} but h has {tuple(h.shape)}")
    if g.device != h.device:
        raise ValueError(f"g is on {g.device} but h is on {h.device}")
    if not (h.is_contiguous() or h.t().is_contiguous()) or g.stride() != h.stride():
        raise ValueError(
            f"h and g must share one row- or column-major layout, got strides {h.stride()} and {g.stride()}"
        )
    t, n = h.shape
    if n % 32 or t % 64:
        raise ValueError(f"h is {t}x{n}: packing MVUE(dh^T) needs n % 32 == 0 and T % 64 == 0")
    check_seed_tensor(seed_tensor, h)
    if not use_triton(h):
        dh = gelu_backward_reference(h, g, approximate)
        return dh, cslt_pack_mvue_t(dh, seed_tensor)
    from kernels.ops._cslt_pack_triton import act_bwd_mvue_pack_t_into
    from kernels.ops.geglu import act_code

    dh = torch.empty_like(h)  # h's strides (row- or column-major)
    out = _alloc(n, t, h.dtype, h.device)
    act_bwd_mvue_pack_t_into(h, g, dh, act_code(approximate), seed_tensor, out)
    seed_tensor.add_(1)  # on the device, as cslt_pack_mvue_t does
    return dh, _packed_view(out, n)


GATED_KINDS = ("geglu", "swiglu")


def gated_act(kind: str, approximate: str) -> int:
    """The activation code of ``kernels.ops.geglu`` for a gated kind (GEGLU: GELU with ``approximate``)."""
    from kernels.ops.geglu import SILU, act_code

    if not isinstance(kind, str) or kind not in GATED_KINDS:
        raise ValueError(f"kind must be one of {GATED_KINDS}, got {kind!r}")
    code = act_code(approximate)  # validated for both kinds: a typo should not pass silently
    return code if kind == "geglu" else SILU


def gated_backward_reference(
    z: torch.Tensor, g: torch.Tensor, kind: str = "geglu", approximate: str = "tanh"
) -> torch.Tensor:
    """The gated backward in float32, rounded to z's dtype, in z's layout: for z = [gate, up]
    [..., 2r] and the output gradient g [..., r], dz = [g * up * act'(gate), g * act(gate)]."""
    gated_act(kind, approximate)
    gate, up = z.float().chunk(2, dim=-1)
    gu = g.float() * up
    if kind == "geglu":
        a, dgate = (
            F.gelu(gate, approximate=approximate),
            torch.ops.aten.gelu_backward(gu, gate, approximate=approximate),
        )
    else:
        a, dgate = F.silu(gate), torch.ops.aten.silu_backward(gu, gate)
    return torch.empty_like(z).copy_(torch.cat([dgate, g.float() * a], dim=-1))


def cslt_gated_backward_mvue_pack_t(
    z: torch.Tensor, g: torch.Tensor, seed_tensor: torch.Tensor, kind: str = "geglu", approximate: str = "tanh"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GEGLU / SwiGLU backward and the packed MVUE(dz^T), in one pass.

    ``z`` = [gate, up] [T, 2r] is the gated activation's input (``kernels.ops.geglu``'s convention,
    GEGLU's GELU with ``approximate``) and ``g`` [T, r] the gradient of its output, fp16/bf16, of
    one orientation (both row-major or both column-major); ``dz`` comes back in z's layout and
    the packed operand is what ``cslt_pack_mvue_t(dz, seed_tensor)`` returns for that ``dz``
    (same uniforms; the seed tensor is read on the device, then incremented). Why: in a gated fst
    FFN, dz is the output gradient of the fused gate-and-up linear, whose weight-gradient GEMM
    needs MVUE(dz^T) packed; fusing saves the pack a full read of dz (as
    :func:`cslt_gelu_backward_mvue_pack_t` does for GELU). Needs T % 64 == 0 and r % 64 == 0 (each
    program packs one 64-row tile of each half). No value checks (graph-safe). Where Triton does
    not run: :func:`gated_backward_reference`, then ``cslt_pack_mvue_t``."""
    from kernels.ops.mvue import check_seed_tensor

    act = gated_act(kind, approximate)
    z = check_tensor("z", z, dtypes=PACK_DTYPES, ndim=2, finite=False)
    g = check_tensor("g", g, dtypes=(z.dtype,), ndim=2, finite=False)
    t, two_r = z.shape
    if g.shape != (t, two_r // 2):
        raise ValueError(
            f"g has shape {tuple(g.shape)}; for z of shape {tuple(z.shape)} it must be ({t}, {two_r // 2})"
        )
    if g.device != z.device:
        raise ValueError(f"g is on {g.device} but z is on {z.device}")
    row_major = z.is_contiguous() and g.is_contiguous()
    col_major = z.t().is_contiguous() and g.t().is_contiguous()
    if not (row_major or col_major):
        raise ValueError(
            f"z and g must both be row-major or both column-major, got strides {z.stride()} and {g.stride()}"
        )
    if t % 64 or two_r % 128:
        raise ValueError(f"z is {t}x{two_r}: the fused gated pack needs T % 64 == 0 and r % 64 == 0")
    check_seed_tensor(seed_tensor, z)
    if not use_triton(z):
        dz = gated_backward_reference(z, g, kind, approximate)
        return dz, cslt_pack_mvue_t(dz, seed_tensor)
    from kernels.ops._cslt_pack_triton import gated_bwd_mvue_pack_t_into

    dz = torch.empty_like(z)  # z's strides (row- or column-major)
    out = _alloc(two_r, t, z.dtype, z.device)
    gated_bwd_mvue_pack_t_into(z, g, dz, act, seed_tensor, out)
    seed_tensor.add_(1)  # on the device, as cslt_pack_mvue_t does
    return dz, _packed_view(out, two_r)


def _self_test_paths(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> bool:
    """The pair (W and a transposed view), its values-only refresh, the fused MVUE pack and the
    GELU and gated backwards fused with it equal the reference packing of the same operands on this device
    (the compiled kernel, not only the interpreter's semantics)."""
    from kernels.ops.mvue import mvue24_nocheck
    from kernels.ops.transposable import transposable_mask

    w = torch.randn(128, 192, device=device, generator=g)
    tm = transposable_mask(w)
    p, pt = cslt_pack_pair(w, tm, dtype=dtype, check=False)
    wm = (w * tm).to(dtype)
    ok = torch.equal(p, cslt_pack_reference(wm, tm)) and torch.equal(
        pt, cslt_pack_reference(wm.t().contiguous(), tm.t().contiguous())
    )
    w2 = torch.randn(128, 192, device=device, generator=g)  # the per-step values-only refresh
    cslt_repack_pair_values(w2, p, pt)
    wm2 = (w2 * tm).to(dtype)
    ok = ok and torch.equal(p, cslt_pack_reference(wm2, tm))
    ok = ok and torch.equal(pt, cslt_pack_reference(wm2.t().contiguous(), tm.t().contiguous()))
    x = torch.randn(128, 96, device=device, generator=g).to(dtype)
    keep = torch.empty(96, 128, dtype=torch.bool, device=device)
    seed = torch.tensor([3], dtype=torch.int64, device=device)
    ref = cslt_pack_reference(mvue24_nocheck(x.t().contiguous(), -1, seed_tensor=seed.clone(), mask_out=keep), keep)
    ok = ok and torch.equal(cslt_pack_mvue_t(x, seed), ref)
    x_col = x.t().contiguous().t()  # rows of x^T contiguous: the kernel's other launch configuration
    seed.fill_(3)
    ok = ok and torch.equal(cslt_pack_mvue_t(x_col, seed), ref)
    for layout in (lambda t: t, lambda t: t.t().contiguous().t()):  # activation backwards fused with the pack
        h, gr = layout(x), layout(torch.randn(128, 96, device=device, generator=g).to(dtype))
        dh, packed = cslt_gelu_backward_mvue_pack_t(h, gr, seed.fill_(5))
        ok = ok and torch.equal(packed, cslt_pack_mvue_t(dh, seed.fill_(5))) and dh.stride() == h.stride()
        z, dout = (
            layout(torch.randn(128, 256, device=device, generator=g).to(dtype)),
            layout(torch.randn(128, 128, device=device, generator=g).to(dtype)),
        )
        dz, packed = cslt_gated_backward_mvue_pack_t(z, dout, seed.fill_(5), "swiglu")
        ok = ok and torch.equal(packed, cslt_pack_mvue_t(dz, seed.fill_(5))) and dz.stride() == z.stride()
    return ok


def layout_matches(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether our packing equals ``torch._cslt_compress`` bit for bit on this device and dtype
    (random 2:4 operands, one of them with padded rows) and the kernel's transposed-view and MVUE
    paths equal the reference packing there; checked once per (device, dtype), then cached. False
    (with a warning) otherwise: callers then compress with torch. Never checks while a CUDA graph
    is being captured (returns False, not cached). Off CUDA there is no cuSPARSELt to match: False."""
    if torch.device(device).type != "cuda":
        return False
    key = (str(device), dtype)
    if key in _LAYOUT_OK:
        return _LAYOUT_OK[key]
    if torch.cuda.is_current_stream_capturing():
        return False
    ok = True
    g = torch.Generator(device=device).manual_seed(0)
    for m, k in ((128, 256), (96, 128)):
        a = torch.randn(m, k, device=device, generator=g).to(dtype)
        idx = torch.rand(m, k // 4, 4, device=device, generator=g).topk(2, -1).indices
        mask = torch.zeros(m, k // 4, 4, dtype=torch.bool, device=device).scatter_(-1, idx, True).reshape(m, k)
        a = torch.where(mask, torch.where(a == 0, 1.0, a), 0.0).to(dtype)  # kept entries nonzero
        theirs = torch._cslt_compress(a)
        ours = cslt_pack(a, mask)
        n = packed_numel(m, k)  # the slack torch allocates after the metadata is never written
        same = torch.equal(theirs.reshape(-1)[:n].view(torch.int16), ours.reshape(-1)[:n].view(torch.int16))
        if theirs.shape != ours.shape or not same:
            ok = False
    if ok:  # the transposed-view and MVUE paths of the kernel against the plain-PyTorch packing
        ok = _self_test_paths(device, dtype, g)
    if not ok:
        warnings.warn(
            f"cuSPARSELt's packed layout on {device} ({dtype}) differs from kernels.ops.cslt_pack's; "
            "compressing with torch._cslt_compress instead (slower)",
            RuntimeWarning,
            stacklevel=2,
        )
    _LAYOUT_OK[key] = ok
    return ok


__all__ = [
    "cslt_decay_cast_pruned",
    "pruned_values_reference",
    "GELU_APPROXIMATIONS",
    "cslt_gelu_backward_mvue_pack_t",
    "cslt_gated_backward_mvue_pack_t",
    "GATED_KINDS",
    "gated_backward_reference",
    "gelu_backward_reference",
    "cslt_pack",
    "cslt_keep_mask_reference",
    "cslt_pack_mvue_t",
    "cslt_pack_pair",
    "cslt_pack_pair_into",
    "cslt_pack_reference",
    "cslt_repack_pair_values",
    "cslt_unpack_reference",
    "layout_matches",
    "packed_alloc",
    "packed_numel",
]
