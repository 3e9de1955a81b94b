"""``Gemm24Only``: the GEMM-level ceiling of an fst ``SparseLinear``, for timing.

A model whose linears are ``Gemm24Only`` runs fst's three 2:4 GEMMs (same shapes, layouts,
algorithms, fused bias) and nothing else, so its step time is what fst would take if packing, MVUE
and masked decay were free (the speed suites' ceiling, ``suites._training_bench``).
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from kernels.ops.common import as_2d, autocast_enabled, no_autocast


class _Gemm24OnlyFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        from kernels.ops.sparse_gemm import cslt_mm_packed

        x2d = as_2d(x, x.shape[-1])
        packed, packed_t = layer.operands(x.dtype)
        col = layer.output_layout == "col"
        y = cslt_mm_packed(packed, tuple(weight.shape), x2d.t(), transpose_result=not col, bias=bias)
        ctx.save_for_backward(x2d)
        ctx.layer, ctx.x_shape, ctx.has_bias = layer, x.shape, bias is not None
        ctx.x_col = not x2d.is_contiguous()
        return (y.t() if col else y).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        from kernels.ops.sparse_gemm import cslt_mm_packed

        (x2d,) = ctx.saved_tensors
        layer = ctx.layer
        out_f, in_f = layer.weight.shape
        dy2d = as_2d(dy, out_f)
        _, packed_t = layer.operands(dy2d.dtype)
        dx = cslt_mm_packed(packed_t, (in_f, out_f), dy2d.t(), transpose_result=not ctx.x_col)
        dx = (dx.t() if ctx.x_col else dx).reshape(ctx.x_shape)
        dw = cslt_mm_packed(layer.grad_operand(dy2d), (out_f, dy2d.shape[0]), x2d).float()  # cast as AMP does
        db = dy2d.sum(0, dtype=torch.float32) if ctx.has_bias else None
        return dx, dw, db, None


# the ceiling layers' fixed weight-gradient operands by (out, tokens, dtype, device), held by the
# layers that use them: an entry lives as long as one of its layers
_GRAD_OPERANDS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class Gemm24Only(nn.Module):
    """Timing-only stand-in for an fst ``SparseLinear`` that runs its three 2:4 GEMMs (same shapes,
    layouts, algorithms, fused bias) and nothing else: the weight operands are packed once and
    reused, and the weight-gradient GEMM reads a fixed random 2:4 [out, tokens] operand instead of
    MVUE(dY^T) (so its dW is not a gradient). Forward and input gradient are exact for the mask
    chosen at the first forward. A model built with it times what fst would take if packing, MVUE
    and masked decay were free: the GEMM-level ceiling of fst's speedup, measured in place, with
    the rest of the model (attention, norms, activation, optimizer) unchanged."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **_: object) -> None:
        super().__init__()
        ref = nn.Linear(in_features, out_features, bias=bias)  # nn.Linear's init and parameters
        self.in_features, self.out_features = in_features, out_features
        self.weight, self.bias = ref.weight, ref.bias
        self.output_layout = "row"
        self._mask: torch.Tensor | None = None
        self._ops: dict = {}

    @property
    def mask(self) -> torch.Tensor:
        if self._mask is None:
            from kernels.ops.transposable import transposable_mask

            with torch.no_grad():
                self._mask = transposable_mask(self.weight.detach())
        return self._mask

    def operands(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        from kernels.ops.sparse_gemm import pack_pair_operands

        if dtype not in self._ops:
            with torch.no_grad():
                self._ops[dtype] = pack_pair_operands(self.weight.detach(), self.mask, dtype)
        return self._ops[dtype]

    def grad_operand(self, dy2d: torch.Tensor) -> torch.Tensor:
        """The fixed [out, tokens] 2:4 operand, one per shape shared by every layer of that shape
        (its values are never read as a gradient): a per-layer copy made the ceiling model the
        largest of all (6 GB more than fst at GPT-2 774M, N=23), so it ran out of memory first."""
        from kernels.ops.nm_mask import nm_mask
        from kernels.ops.sparse_gemm import pack_operand

        key = ("g", dy2d.shape[0], dy2d.dtype)
        if key not in self._ops:
            shared = (self.out_features, dy2d.shape[0], dy2d.dtype, dy2d.device)
            op = _GRAD_OPERANDS.get(shared)
            if op is None:
                with torch.no_grad():
                    g = torch.randn(self.out_features, dy2d.shape[0], device=dy2d.device, dtype=dy2d.dtype)
                    op = pack_operand(g, nm_mask(g, 2, 4, dim=1))
                _GRAD_OPERANDS[shared] = op
            self._ops[key] = op
        return self._ops[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dev = x.device.type
        dt = torch.get_autocast_dtype(dev) if autocast_enabled(dev) else x.dtype
        with no_autocast(dev):
            return _Gemm24OnlyFn.apply(x.to(dt), self.weight, self.bias, self)
