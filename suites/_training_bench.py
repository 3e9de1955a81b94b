"""Shared pieces of the 2:4 training-speed suites (figure6, table8): layer factories per mode, the
fwd+bwd call that gets graph-captured, and the correctness check every timed module passes first.

Modes: ``dense`` (nn.Linear), ``half`` (dense, FFN inner width halved: the iso-FLOP baseline) and
the SparseLinear modes ``fst``, ``weight24``, ``srste``. Sparse layers run with ``checks=False``
and ``track_flip=False`` (no host syncs, so fwd+bwd can be captured in a CUDA graph)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import torch
from torch import nn

from repro.models.gpt2 import GPT2Config

SPARSE_MODES = ("fst", "weight24", "srste")


def factory(mode: str) -> Callable[..., nn.Module] | None:
    """Linear factory for the FFN linears of ``mode`` (None: nn.Linear)."""
    if mode in ("dense", "half"):
        return None
    from kernels.sparse_linear import SparseLinear

    return functools.partial(SparseLinear, mode=mode, checks=False, track_flip=False)


def mode_config(cfg: GPT2Config, mode: str) -> GPT2Config:
    """``cfg`` with the FFN of ``mode`` (half: d_ff halved)."""
    return dataclasses.replace(cfg, ffn_mode=mode)


def fwd_bwd(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    """One forward and backward of ``module`` on a static input (input gradient included, as
    inside a network); parameter gradients accumulate in place across calls (same for all modes)."""

    def call() -> None:
        x.grad = None
        module(x).backward(dy)

    return call


def sparse_layers(module: nn.Module) -> list[nn.Module]:
    from kernels.sparse_linear import SparseLinear

    return [m for m in module.modules() if isinstance(m, SparseLinear) and not m.is_dense]


@torch.no_grad()
def masked_dense_twin(module: nn.Module, build_dense: Callable[[], nn.Module]) -> nn.Module:
    """A dense float32 copy of ``module`` whose sparse linears' weights are multiplied by their
    current masks: the reference of the sparse module's forward and input gradient."""
    ref = build_dense().to(device=next(module.parameters()).device, dtype=torch.float32)
    state = {k: v.float() for k, v in module.state_dict().items()}
    sparse = set(sparse_layers(module))  # once, not per module
    for name, m in module.named_modules():
        if m in sparse:
            state[f"{name}.weight" if name else "weight"] = m.weight.float() * m.mask  # "" = module itself
    ref.load_state_dict(state, strict=True)
    return ref


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_against_twin(
    module: nn.Module, build_dense: Callable[[], nn.Module], x: torch.Tensor, dy: torch.Tensor
) -> tuple[float, float]:
    """Relative errors of output and input gradient vs the masked dense float32 twin."""
    x1 = x.detach().clone().requires_grad_(True)
    y = module(x1)
    y.backward(dy)
    ref = masked_dense_twin(module, build_dense)
    x2 = x.detach().float().clone().requires_grad_(True)
    y2 = ref(x2)
    y2.backward(dy.float())
    for p in module.parameters():
        p.grad = None
    return rel_err(y, y2), rel_err(x1.grad, x2.grad)
