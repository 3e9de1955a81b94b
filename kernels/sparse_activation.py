"""GELU between an fst ``SparseLinear`` and the next layer, with a backward that also packs the
layer's weight-gradient operand.

In the fst FFN, H = fc(X) goes through GELU. fc's backward needs MVUE(dH^T) packed for its 2:4
weight-gradient GEMM, and dH is what the GELU backward writes: two passes over dH (write it, read
it back to pack). :func:`fst_gelu` does both in one
(:func:`kernels.cslt_pack.cslt_gelu_backward_mvue_pack_t`) and hands the packed operand to fc's
backward through the slot of fc's forward (:class:`kernels.sparse_linear.GradHandoff`); fc then
skips its own pack. Where that does not apply (fc is not an fst layer on cuSPARSELt's graph-safe
path, another layout or dtype, a device whose packing layout is not verified), it is ``F.gelu``
with torch's backward, so the result is the same GELU either way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from kernels._common import use_triton
from kernels.cslt_pack import GELU_APPROXIMATIONS, cslt_gelu_backward_mvue_pack_t, layout_matches
from kernels.sparse_linear import GradHandoff


def _as_tokens(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` as a [T, n] view (row- or column-major) without a copy, or None."""
    t2 = t.reshape(-1, t.shape[-1]) if t.dim() != 2 else t
    if t2.data_ptr() != t.data_ptr():
        return None
    return t2 if t2.is_contiguous() or t2.t().is_contiguous() else None


def _fusable(z2: torch.Tensor | None, g2: torch.Tensor | None) -> bool:
    return (
        z2 is not None
        and g2 is not None
        and use_triton(z2)
        and z2.stride() == g2.stride()
        and z2.dtype == g2.dtype
        and z2.dtype in (torch.float16, torch.bfloat16)
        and z2.shape[0] % 64 == 0
        and z2.shape[1] % 32 == 0
        and layout_matches(z2.device, z2.dtype)
    )


class _FstGeluFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, approximate: str, handoff: GradHandoff) -> torch.Tensor:
        ctx.save_for_backward(z)
        ctx.approximate, ctx.handoff = approximate, handoff
        return F.gelu(z, approximate=approximate)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor):
        (z,) = ctx.saved_tensors
        handoff: GradHandoff = ctx.handoff
        z2, g2 = _as_tokens(z), _as_tokens(g)
        if _fusable(z2, g2):
            dh2, packed = cslt_gelu_backward_mvue_pack_t(z2, g2, handoff.layer_seed, ctx.approximate)
            handoff.offer(dh2, packed)
            return dh2.view(z.shape) if dh2.shape != z.shape else dh2, None, None
        return torch.ops.aten.gelu_backward(g, z, approximate=ctx.approximate), None, None


def fst_gelu(z: torch.Tensor, producer: nn.Module, approximate: str = "none") -> torch.Tensor:
    """``F.gelu(z, approximate)`` where ``z`` is the output of ``producer``'s latest forward; when
    ``producer`` is a ``SparseLinear`` whose backward packs MVUE(dZ^T) on the graph-safe
    cuSPARSELt path, the GELU backward computes dZ and that operand in one pass and hands it
    over (see the module docstring). Any other producer: plain ``F.gelu``."""
    if not isinstance(approximate, str) or approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")
    handoff = getattr(producer, "grad_handoff", None)
    if not isinstance(handoff, GradHandoff) or not handoff.wants_packed_grad or not torch.is_grad_enabled():
        return F.gelu(z, approximate=approximate)
    return _FstGeluFn.apply(z, approximate, handoff)


__all__ = ["fst_gelu"]
