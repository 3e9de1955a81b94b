"""GELU (or GEGLU / SwiGLU) between an fst ``SparseLinear`` and the next layer, with a backward
that also packs the layer's weight-gradient operand.

In the fst FFN, H = fc(X) goes through GELU. fc's backward needs MVUE(dH^T) packed for its 2:4
weight-gradient GEMM, and dH is what the GELU backward writes: two passes over dH (write it, read
it back to pack). :func:`fst_gelu` does both in one
(:func:`kernels.ops.cslt_pack.cslt_gelu_backward_mvue_pack_t`) and hands the packed operand to fc's
backward through the slot of fc's forward (:class:`kernels.layers.sparse_linear.GradHandoff`); fc then
skips its own pack. Where that does not apply (fc is not an fst layer on cuSPARSELt's graph-safe
path, another layout or dtype, a device whose packing layout is not verified), it is ``F.gelu``
with torch's backward, so the result is the same GELU either way. :func:`fst_gated` does the same
for a gated activation on fc's fused [gate, up] output
(:func:`kernels.ops.cslt_pack.cslt_gated_backward_mvue_pack_t`); its fallback is ``kernels.ops.geglu``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

import kernels.ops.compile_ops as compile_ops
from kernels.layers.sparse_linear import GradHandoff, SparseLinear
from kernels.ops.common import as_layout, empty_in_layout, is_col_major, use_triton
from kernels.ops.cslt_pack import (
    GATED_KINDS,
    GELU_APPROXIMATIONS,
    cslt_gated_backward_mvue_pack_t,
    cslt_gelu_backward_mvue_pack_t,
    gated_act,
    gated_backward_reference,
    layout_matches,
)
from kernels.ops.geglu import geglu, launch_backward, swiglu


def _as_tokens(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` as a [T, n] view (row- or column-major) without a copy, or None."""
    t2 = t.reshape(-1, t.shape[-1]) if t.dim() != 2 else t
    if t2.data_ptr() != t.data_ptr():
        return None
    return t2 if t2.is_contiguous() or t2.t().is_contiguous() else None


def _fusable(z2: torch.Tensor | None, g2: torch.Tensor | None, width_multiple: int) -> bool:
    """Whether the fused backward + pack takes the [T, n] views ``z2`` (the activation's input) and
    ``g2`` (its output gradient): both exist, are 16-bit of one dtype and one orientation, T and n
    are multiples of 64 and ``width_multiple``, and our packing layout holds on the device."""
    return (
        z2 is not None
        and g2 is not None
        and use_triton(z2)
        and z2.dtype == g2.dtype
        and z2.dtype in (torch.float16, torch.bfloat16)
        and (z2.stride(1) == 1) == (g2.stride(1) == 1)
        and z2.shape[0] % 64 == 0
        and z2.shape[1] % width_multiple == 0
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
        if _fusable(z2, g2, 32) and z2.stride() == g2.stride():
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
    if torch.compiler.is_compiling():  # compiled: no hand-off (the compiled fc packs its own operand)
        return F.gelu(z, approximate=approximate)
    handoff = getattr(producer, "grad_handoff", None)
    if not isinstance(handoff, GradHandoff) or not handoff.wants_packed_grad or not torch.is_grad_enabled():
        return F.gelu(z, approximate=approximate)
    return _FstGeluFn.apply(z, approximate, handoff)


class _FstGatedFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, kind: str, approximate: str, handoff: GradHandoff) -> torch.Tensor:
        # kernels.ops.geglu's forward (no autograd in here); it runs on z as it is (row- or column-major)
        out = geglu(z, approximate, check_finite=False) if kind == "geglu" else swiglu(z, check_finite=False)
        ctx.save_for_backward(z)
        ctx.kind, ctx.approximate, ctx.handoff = kind, approximate, handoff
        ctx.act = gated_act(kind, approximate)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor):
        (z,) = ctx.saved_tensors
        handoff: GradHandoff = ctx.handoff
        col_major = not z.is_contiguous() and is_col_major(z)
        if not (col_major or z.is_contiguous()):
            z = z.contiguous()  # what kernels.ops.geglu runs on
        g = as_layout(g.to(z.dtype), col_major)  # as kernels.ops.geglu's backward takes it
        z2, g2 = _as_tokens(z), _as_tokens(g)
        if _fusable(z2, g2, 128):  # r % 64: each program packs whole 64-row tiles of both halves
            dz2, packed = cslt_gated_backward_mvue_pack_t(z2, g2, handoff.layer_seed, ctx.kind, ctx.approximate)
            handoff.offer(dz2, packed)
            return dz2.view(z.shape), None, None, None
        if not use_triton(z):
            return gated_backward_reference(z, g, ctx.kind, ctx.approximate), None, None, None
        dz = empty_in_layout(z, z.shape[-1], col_major)
        launch_backward(z, g, dz, col_major, ctx.act)
        return dz, None, None, None


def fst_gated(z: torch.Tensor, producer: nn.Module, kind: str, approximate: str = "none") -> torch.Tensor:
    """``kernels.ops.geglu.geglu(z, approximate)`` (``kind="geglu"``) or ``swiglu(z)`` (``"swiglu"``)
    of ``z`` = [gate, up], the output of ``producer``'s latest forward, without the finiteness
    check; when ``producer`` is a ``SparseLinear`` whose backward packs MVUE(dZ^T) on the
    graph-safe cuSPARSELt path, the backward computes dZ and that operand in one pass and hands it
    over (as :func:`fst_gelu` does). Any other producer: plain ``geglu`` / ``swiglu``."""
    gated_act(kind, approximate)
    if torch.compiler.is_compiling():  # a custom op the compiler traces (no hand-off when compiled)
        return compile_ops.gated(z, kind, approximate)
    handoff = getattr(producer, "grad_handoff", None)
    if not isinstance(handoff, GradHandoff) or not handoff.wants_packed_grad or not torch.is_grad_enabled():
        return geglu(z, approximate, check_finite=False) if kind == "geglu" else swiglu(z, check_finite=False)
    return _FstGatedFn.apply(z, kind, approximate, handoff)


__all__ = ["GATED_KINDS", "fst_gated", "fst_gelu"]


def fst_act(fc: nn.Module, x: torch.Tensor, kind: str, approximate: str = "none") -> torch.Tensor:
    """``kind`` ("gelu", "geglu", "swiglu") of ``fc(x)``: :func:`fst_gelu` / :func:`fst_gated` after
    ``fc``, except under ``torch.compile`` with ``fc`` an fst ``SparseLinear`` with MVUE, where the
    layer and the activation are one custom op (``kernels.ops.compile_ops.linear_act``) whose
    backward fuses the activation backward with the pack of fc's weight-gradient operand, as the
    eager hand-off does (compiled, the two layers cannot hand a tensor over between backwards)."""
    if kind == "gelu":
        if not isinstance(approximate, str) or approximate not in GELU_APPROXIMATIONS:
            raise ValueError(f"approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")
    else:
        gated_act(kind, approximate)
    fusable = isinstance(fc, SparseLinear) and fc.mode == "fst" and fc.mvue and not fc.is_dense
    if torch.compiler.is_compiling() and fusable:  # (is_dense is guarded: the dense phase recompiles)
        fc.check_input(x)
        return fc._forward_compiled(x, act=(kind, approximate))
    z = fc(x)
    return fst_gelu(z, fc, approximate) if kind == "gelu" else fst_gated(z, fc, kind, approximate)
