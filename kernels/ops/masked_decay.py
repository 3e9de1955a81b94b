"""Masked decay on gradients (Hu et al. 2024, Sec. 4.2, Eq. 10).

    g <- g + alpha * (~m) * w        (m: bool 2:4 mask of w, True = kept)

applied to the gradient *before* the optimizer (so Adam normalises the decay per dimension),
instead of SR-STE's decay on the weights (Eq. 8). One fused, flat elementwise Triton kernel
updates ``grad`` in place: it reads grad, weight and mask once and writes grad once. Math is
fp32 (``grad + alpha * weight`` rounded once to grad's dtype); kept positions are left
bit-for-bit untouched.

Checks (this is a correctness suite, so both inputs are scanned): grad and weight must be
finite (NaN/Inf -> ValueError, one max-reduction over each), and the result must fit in the
dtype: ``max|grad| + |alpha| * max|weight|`` above the dtype's max raises a ValueError *before*
grad is touched (conservative bound; it only bites for values near the fp16 range).
"""

from __future__ import annotations

import math
import numbers

import torch
import triton
import triton.language as tl

from kernels.ops.common import (
    FLOAT_DTYPES,
    cast_out,
    cdiv,
    check_same_device,
    check_same_shape,
    check_tensor,
    use_triton,
)

_BLOCK = 1024


@triton.jit
def _masked_decay_kernel(g_ptr, w_ptr, m_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    g = tl.load(g_ptr + offs, mask=valid, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=valid, other=0.0).to(tl.float32)
    keep = tl.load(m_ptr + offs, mask=valid, other=1) != 0
    # kept positions are not written (grad stays bit-exact there)
    tl.store(g_ptr + offs, cast_out(g + alpha * w, g_ptr), mask=valid & ~keep)


@triton.jit
def _masked_decay_cast_kernel(g_ptr, w_ptr, m_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    g = tl.load(g_ptr + offs, mask=valid, other=0.0).to(tl.float32)
    keep = tl.load(m_ptr + offs, mask=valid, other=1) != 0
    w = tl.load(w_ptr + offs, mask=valid & ~keep, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, cast_out(tl.where(keep, g, g + alpha * w), out_ptr), mask=valid)


def _check_alpha(alpha: object) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number, got {type(alpha).__name__}")
    a = float(alpha)
    if not math.isfinite(a):
        raise ValueError(f"alpha must be finite, got {a}")
    return a


def _check_meta(grad: object, weight: object, mask: object, alpha: object, *, same_dtype: bool) -> float:
    """Types, shapes, devices (no value scans, no host sync); returns alpha as a float."""
    grad = check_tensor("grad", grad, dtypes=FLOAT_DTYPES, finite=False)
    weight = check_tensor("weight", weight, dtypes=FLOAT_DTYPES, finite=False)
    mask = check_tensor("mask", mask, dtypes=(torch.bool,), finite=False)
    if same_dtype and weight.dtype != grad.dtype:
        raise TypeError(f"weight has dtype {weight.dtype} but grad has {grad.dtype}; they must match")
    check_same_shape(grad=grad, weight=weight, mask=mask)
    check_same_device(grad=grad, weight=weight, mask=mask)
    return _check_alpha(alpha)


def _max_abs(name: str, t: torch.Tensor) -> float:
    """max|t|; raises on NaN/Inf (min/max propagate both), one pass, no temporary."""
    if t.numel() == 0:
        return 0.0
    lo, hi = torch.aminmax(t.detach())
    m = max(-float(lo), float(hi))
    if not math.isfinite(m):
        raise ValueError(f"{name} contains NaN or Inf; refusing to compute on non-finite values")
    return m


def _validate(grad: object, weight: object, mask: object, alpha: object) -> float:
    a = _check_meta(grad, weight, mask, alpha, same_dtype=True)
    gmax = _max_abs("grad", grad)
    wmax = _max_abs("weight", weight)
    bound = gmax + abs(a) * wmax
    fmax = torch.finfo(grad.dtype).max
    if bound > fmax:
        raise ValueError(
            f"max|grad| + |alpha| * max|weight| = {bound:.3e} exceeds the {grad.dtype} range ({fmax:.3e}); "
            "the decayed gradient could overflow"
        )
    return a


def masked_decay_(grad: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """In place ``grad += alpha * weight * (~mask)``; returns ``grad`` (same object).

    grad must be contiguous (an in-place update of a copy would be silently lost) and must not
    require grad (the update is not differentiable); weight and mask may be strided (they are
    copied if so). Same shape, device and float dtype for grad and weight; mask is bool
    (True = kept, not decayed); alpha a finite real.
    """
    if isinstance(grad, torch.Tensor) and grad.requires_grad:
        raise ValueError("grad requires grad; masked_decay_ is an in-place, non-differentiable update")
    a = _validate(grad, weight, mask, alpha)
    if not grad.is_contiguous():
        raise ValueError(
            f"grad must be contiguous for the in-place update (shape {tuple(grad.shape)}, "
            f"strides {grad.stride()}); call .contiguous() and assign the result yourself"
        )
    if not use_triton(grad):
        res = masked_decay_reference(grad, weight, mask, a)
        grad.copy_(res)
        return grad
    n = grad.numel()
    if n == 0 or a == 0.0:
        return grad
    w = weight.contiguous()
    m = mask.contiguous()
    _masked_decay_kernel[(cdiv(n, _BLOCK),)](grad, w, m, a, n, BLOCK=_BLOCK)
    torch.autograd.graph.increment_version(grad)  # a Triton write is invisible to autograd otherwise
    return grad


def masked_decay_nocheck_(grad: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """:func:`masked_decay_` without the value scans (no host sync), for CUDA-graph capture.

    Same result bit for bit. Metadata (types, shapes, dtypes, devices, contiguity of grad) is
    still checked; finiteness and the overflow bound are the caller's duty.
    """
    if isinstance(grad, torch.Tensor) and grad.requires_grad:
        raise ValueError("grad requires grad; masked_decay_ is an in-place, non-differentiable update")
    a = _check_meta(grad, weight, mask, alpha, same_dtype=True)
    if not grad.is_contiguous():
        raise ValueError(f"grad must be contiguous for the in-place update (strides {grad.stride()})")
    n = grad.numel()
    if n == 0 or a == 0.0:
        return grad
    if not use_triton(grad):
        g = grad.to(torch.float32)
        grad.copy_(torch.where(mask, g, g + a * weight.to(torch.float32)).to(grad.dtype))
        return grad
    _masked_decay_kernel[(cdiv(n, _BLOCK),)](grad, weight.contiguous(), mask.contiguous(), a, n, BLOCK=_BLOCK)
    torch.autograd.graph.increment_version(grad)
    return grad


def masked_decay_cast_nocheck(
    grad: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, alpha: float
) -> torch.Tensor:
    """New tensor in weight's dtype: ``grad.to(weight.dtype) + alpha * weight * (~mask)`` in one
    pass (the low-precision weight gradient of a GEMM, cast to the master weight's dtype and decayed:
    reads grad, weight and mask once, writes once, instead of a cast pass and an in-place pass).
    Bit for bit ``masked_decay_nocheck_(grad.to(weight.dtype), weight, mask, alpha)``. No value
    scans (graph-safe); metadata is checked."""
    a = _check_meta(grad, weight, mask, alpha, same_dtype=False)
    if not use_triton(grad) or grad.numel() == 0:
        return masked_decay_nocheck_(grad.to(weight.dtype).contiguous(), weight, mask, a)
    out = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    n = grad.numel()
    _masked_decay_cast_kernel[(cdiv(n, _BLOCK),)](
        grad.contiguous(), weight.contiguous(), mask.contiguous(), out, a, n, BLOCK=_BLOCK
    )
    return out


def masked_decay_reference(grad: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """New tensor ``grad + alpha * weight * (~mask)`` (fp32 math, rounded once to grad's dtype)."""
    a = _validate(grad, weight, mask, alpha)
    g = grad.to(torch.float32)
    dec = g + a * weight.to(torch.float32)
    return torch.where(mask, g, dec).to(grad.dtype)


def masked_decay_bytes(grad: torch.Tensor, weight: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> int:
    """Minimum DRAM traffic of :func:`masked_decay_`: read grad, weight and mask, write grad."""
    n = grad.numel()
    wsize = weight.element_size() if weight is not None else grad.element_size()
    msize = mask.element_size() if mask is not None else 1
    return n * (2 * grad.element_size() + wsize + msize)


__all__ = [
    "masked_decay_",
    "masked_decay_bytes",
    "masked_decay_cast_nocheck",
    "masked_decay_nocheck_",
    "masked_decay_reference",
]
