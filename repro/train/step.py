"""One training step, shared by the pretraining loop, table8's timed (CUDA-graph-captured) step and
FAST's masked trainer, so the three measure and train the same computation.

``train_step`` does forward, loss, backward (over ``grad_accum`` micro-batches), gradient clipping,
``optimizer.step()`` and ``zero_grad``, and returns the loss and the gradient norm as device tensors:
nothing in it waits for the host, so it can be captured in a CUDA graph (with ``set_to_none=False``
and a capturable optimizer) and a loop can read its outputs later.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LossFn", "StepOutput", "lm_loss", "lr_at", "make_optimizer", "train_step"]

LossFn = Callable[[nn.Module, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


class StepOutput(NamedTuple):
    """Device tensors of one step: mean loss over the micro-batches, and the gradient norm before
    clipping (None where neither clipping nor ``grad_norm=True`` asked for it)."""

    loss: torch.Tensor
    grad_norm: torch.Tensor | None


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
    """Mean next-token cross entropy of ``model(x)`` [B, T, V] against ``y`` [B, T], in float32."""
    if y is None:
        raise ValueError("lm_loss needs targets y")
    logits = model(x)
    return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())


def lr_at(step: int, *, steps: int, lr: float, warmup: int, min_lr_ratio: float) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warm-up, then cosine to lr * min_lr_ratio."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (min_lr_ratio + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - min_lr_ratio))


def make_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    *,
    eps: float = 1e-8,
    capturable: bool = False,
) -> torch.optim.AdamW:
    """AdamW (fused on CUDA); matrices and embeddings decay, biases and norm gains do not (nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    cuda = all(p.is_cuda for p in params)
    kw = {"fused": True, **({"capturable": True} if capturable else {})} if cuda else {}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **kw)


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in optimizer.param_groups for p in g["params"]]


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor | None,
    *,
    loss_fn: LossFn = lm_loss,
    grad_accum: int = 1,
    grad_clip: float | None = 1.0,
    amp_dtype: torch.dtype | None = None,
    autocast_cache: bool = False,
    scaler: torch.amp.GradScaler | None = None,
    set_to_none: bool = True,
    grad_norm: bool = True,
    foreach: bool | None = None,
) -> StepOutput:
    """One optimizer step on the batch ``x`` (targets ``y``), split into ``grad_accum`` micro-batches
    along dim 0. ``amp_dtype``: autocast dtype (None: none). Returns device tensors, no host sync
    (except through ``scaler``, the fp16 path, which checks for infs)."""
    if grad_accum < 1 or x.shape[0] % grad_accum:
        raise ValueError(f"batch of {x.shape[0]} sequences does not split into grad_accum={grad_accum} micro-batches")
    xs = x.chunk(grad_accum) if grad_accum > 1 else (x,)
    ys = y.chunk(grad_accum) if (y is not None and grad_accum > 1) else (y,) * grad_accum
    total = None
    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        # DDP: all-reduce the gradients only in the last micro-batch's backward
        last = i == grad_accum - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            if amp_dtype is not None:
                ctx = torch.autocast(xi.device.type, dtype=amp_dtype, cache_enabled=autocast_cache)
            else:
                ctx = contextlib.nullcontext()
            with ctx:
                loss = loss_fn(model, xi, yi)
            scaled = loss / grad_accum if grad_accum > 1 else loss
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total = loss.detach() if total is None else total + loss.detach()
    assert total is not None
    params = _params(optimizer)
    if scaler is not None:
        scaler.unscale_(optimizer)
    norm = None
    if grad_clip:
        norm = torch.nn.utils.clip_grad_norm_(params, float(grad_clip), foreach=foreach)
    elif grad_norm:
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, foreach=foreach) if grads else torch.zeros((), device=x.device)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=set_to_none)
    return StepOutput(total / grad_accum if grad_accum > 1 else total, None if norm is None else norm.detach())
