"""Helpers shared by the SparseLinear tests: a float64 reference of every mode from its
definition, data, one forward/backward, layouts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import kernels.ops.transposable as tr_mod
from kernels import SparseLinear
from kernels.ops.mvue import mvue24_reference, mvue24_uniforms

SPARSE_MODES = ("fst", "srste", "weight24")


def uniforms_for(seed: int, n: int, plain: bool) -> torch.Tensor:
    if plain:
        return torch.rand(n, generator=torch.Generator().manual_seed(seed))
    return mvue24_uniforms(seed, n, "cpu")


def mvue_rows_ref(dyt: torch.Tensor, seed: int, plain: bool = False) -> torch.Tensor:
    """MVUE of dY^T [out, T] along T as the layer draws it (zero-padded to T % 4 == 0)."""
    t = dyt.shape[1]
    pad = (-t) % 4
    xp = F.pad(dyt, (0, pad)).contiguous()
    return mvue24_reference(xp, -1, u=uniforms_for(seed, xp.numel() // 4, plain))[:, :t]


def layer_reference(layer: SparseLinear, x: torch.Tensor, dy: torch.Tensor, mask: torch.Tensor, seed, plain=False):
    """float64 (y, dx, dW, db) from the definition of the layer's mode."""
    w = layer.weight.detach().double()
    x2 = x.detach().reshape(-1, layer.in_features).double()
    dy2 = dy.reshape(-1, layer.out_features)
    wm = w * mask
    y = x2 @ wm.T
    if layer.bias is not None:
        y = y + layer.bias.detach().double()
    dx = dy2.double() @ wm
    g = mvue_rows_ref(dy2.t().contiguous(), seed, plain).double() if layer.mode == "fst" else dy2.double().t()
    dw = g @ x2
    if layer.mode != "dense":
        dw = dw + layer.decay * w * (~mask).double()
    db = dy2.double().sum(0)
    return y.reshape(*x.shape[:-1], -1), dx.reshape(x.shape), dw, db


def run_layer(layer: SparseLinear, x: torch.Tensor, dy: torch.Tensor):
    x = x.clone().requires_grad_(True)
    assert layer.weight.grad is None
    y = layer(x)
    y.backward(dy)
    return y, x.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad


def layer_data(shape, out_features, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    dy = torch.randn(*shape[:-1], out_features, generator=g)
    return x, dy


def col_major(t: torch.Tensor) -> torch.Tensor:
    """The same values stored column-major: ``t.movedim(-1, 0)`` contiguous."""
    return t.movedim(-1, 0).contiguous().movedim(0, -1)


def is_col_major(t: torch.Tensor) -> bool:
    return t.movedim(-1, 0).is_contiguous() and not t.is_contiguous()


def opt_mask(w: torch.Tensor) -> torch.Tensor:
    return tr_mod.transposable_mask_reference(w.detach())
