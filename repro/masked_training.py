"""Masked sparse training: the masks of the sparse linears are regenerated every k optimizer steps.

A user-supplied mask function sees the weights of *all* sparse linears at once (so it can compute
a global pivot, as flex-SS does) and returns one bool mask per weight (True = kept). The trainer
keeps the weights exactly sparse: masks are applied when they are made and again after every
optimizer step (gradients are dense; the optimizer may move pruned weights, the re-application
sets them back to zero).

Step ``i`` (counting from 0) of ``MaskedTrainer.step``:

1. if ``i % every == 0``: regenerate the masks (mask function + apply), timed;
2. forward and loss (bf16 autocast on CUDA), backward, ``optimizer.step()``, ``zero_grad``: the
   pretraining loop's ``repro.train.step.train_step`` (no clipping);
3. re-apply the current masks.

Readings to keep in mind:

- Because pruned weights are exact zeros when the next masks are made, a criterion that ranks by
  |w| alone keeps the previous support except where kept weights tie with zero, so its flip rate
  is about 0. Flip rates comparable with Hu et al.'s (dense weights, masks recomputed from them)
  need a criterion that looks at more than the sparse weights; this trainer measures the cost of
  regeneration and the sparse-weight regime.
- ``flip_rates[j]`` compares regeneration ``j + 1`` with regeneration ``j`` (the first has nothing
  to compare with): the fraction of mask entries, over all sparse linears, that changed.
- ``mask_time_ms`` covers the mask function, the checks and applying the new masks (CUDA events
  on a GPU, read lazily so the training loop never waits for the host; ``perf_counter`` on a CPU).
  The per-step re-application is part of the step time.
- The trainer copies the returned masks into one of two flat bool buffers of its own (one
  ``torch.cat``, a launch or two for any number of masks), applies and keeps those views, and
  counts the flips as one compare of the two buffers: the flip count used to be a compare and a
  sum a mask (336 launches for MAP-NEO 460M's 168 linears, host time that delayed the next
  step's launches). So a mask function may reuse its output tensors from call to call (FAST's
  ``FlexMasker`` overwrites one buffer); it must not modify the weights it is given.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

from repro.train.step import train_step

__all__ = ["MaskFn", "MaskedTrainer", "per_tensor_magnitude_mask", "time_training_steps"]

MaskFn = Callable[[list[torch.Tensor]], list[torch.Tensor]]


def per_tensor_magnitude_mask(density: float) -> MaskFn:
    """A simple mask function: keep the ``density`` fraction of largest |w| of each tensor."""
    if isinstance(density, bool) or not isinstance(density, (int, float)):  # True passed as 1.0
        raise TypeError(f"density must be a number, got {density!r}")
    if not 0.0 < density <= 1.0:  # NaN fails this too
        raise ValueError(f"density must be in (0, 1], got {density!r}")

    def fn(weights: list[torch.Tensor]) -> list[torch.Tensor]:
        masks = []
        for w in weights:
            flat = w.reshape(-1)
            k = max(1, round(density * flat.numel()))
            idx = flat.abs().topk(k, sorted=False).indices
            m = torch.zeros(flat.shape, dtype=torch.bool, device=w.device)
            m[idx] = True
            masks.append(m.view(w.shape))
        return masks

    return fn


class MaskedTrainer:
    """Sparse training of ``model`` with the masks of ``linears`` regenerated every ``every`` steps.

    ``loss_fn(tokens) -> scalar`` defaults to ``model.loss``; ``autocast`` (default: on for CUDA)
    runs the forward under ``torch.autocast(dtype=torch.bfloat16)``.
    """

    def __init__(
        self,
        model: nn.Module,
        linears: dict[str, nn.Linear],
        mask_fn: MaskFn,
        every: int,
        optimizer: torch.optim.Optimizer,
        *,
        loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        autocast: bool | None = None,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every (mask regeneration interval k) must be an int >= 1, got {every!r}")
        if not linears:
            raise ValueError("linears is empty: nothing to mask")
        for name, lin in linears.items():
            if not isinstance(lin, nn.Linear):
                raise ValueError(f"linears[{name!r}] is a {type(lin).__name__}, not an nn.Linear")
        if not callable(mask_fn):
            raise ValueError("mask_fn must be callable: list of weights -> list of bool masks")
        if loss_fn is None:
            loss_fn = getattr(model, "loss", None)
            if not callable(loss_fn):
                raise ValueError("model has no loss(tokens) method: pass loss_fn")
        self.model = model
        self.linears = dict(linears)
        self.names = list(self.linears)
        self.mask_fn = mask_fn
        self.every = every
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.device = self.linears[self.names[0]].weight.device
        self.autocast = self.device.type == "cuda" if autocast is None else bool(autocast)
        self.step_index = 0  # optimizer steps taken through step()
        self.masks: list[torch.Tensor] | None = None  # in the order of self.names
        self.regeneration_steps: list[int] = []  # step_index at each regeneration
        self._numel = sum(lin.weight.numel() for lin in self.linears.values())
        self._buffers: list[torch.Tensor] = []  # two flat bool buffers: the masks, the previous ones
        self._flip_counts: list[torch.Tensor] = []  # device scalars, read lazily
        self._flip_rates: list[float] = []
        self._mask_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []  # not yet read
        self._mask_times_ms: list[float] = []

    # masks -----------------------------------------------------------------------------------

    def _weights(self) -> list[torch.Tensor]:
        return [self.linears[n].weight for n in self.names]

    def _check_masks(self, masks: object, weights: list[torch.Tensor]) -> list[torch.Tensor]:
        if not isinstance(masks, list | tuple):
            raise ValueError(f"mask_fn must return a list of bool tensors, got {type(masks).__name__}")
        if len(masks) != len(weights):
            raise ValueError(f"mask_fn returned {len(masks)} masks for {len(weights)} sparse linears")
        for name, m, w in zip(self.names, masks, weights, strict=True):
            if not isinstance(m, torch.Tensor):
                raise ValueError(f"mask for linear {name!r} is a {type(m).__name__}, not a tensor")
            if m.dtype != torch.bool:
                raise ValueError(f"mask for linear {name!r} has dtype {m.dtype}, must be torch.bool")
            if m.shape != w.shape:
                raise ValueError(
                    f"mask for linear {name!r} has shape {tuple(m.shape)}, weight has shape {tuple(w.shape)}"
                )
            if m.device != w.device:
                raise ValueError(f"mask for linear {name!r} is on {m.device}, weight is on {w.device}")
        return list(masks)

    @torch.no_grad()
    def apply_masks(self) -> None:
        """Zero the pruned weights (weight *= mask) of every sparse linear, in one foreach call (for
        MAP-NEO 460M's 168 weights on an H200: host 1.10 ms against 1.34 ms for a ``mul_`` a weight,
        the same device time; results/tuning/h200_probe_apply_masks_f5f92a8.txt)."""
        if self.masks is None:
            return
        torch._foreach_mul_(self._weights(), self.masks)

    @torch.no_grad()
    def regenerate(self) -> None:
        """Make new masks from the current weights, store them, apply them; timed, flip rate recorded."""
        weights = self._weights()
        cuda = self.device.type == "cuda"
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        masks = self._check_masks(self.mask_fn([w.detach() for w in weights]), weights)
        kept = self._keep(masks)
        torch._foreach_mul_(weights, kept)  # as apply_masks
        if cuda:
            end.record()
            self._mask_events.append((start, end))
        else:
            self._mask_times_ms.append((time.perf_counter() - t0) * 1e3)
        if self.masks is not None:
            self._flip_counts.append(self._count_flips(self.masks, kept))
        self.masks = kept
        self.regeneration_steps.append(self.step_index)

    def _keep(self, masks: list[torch.Tensor]) -> list[torch.Tensor]:
        """The trainer's own copy of ``masks``: one ``torch.cat`` into the flat buffer that does not
        hold the current masks, viewed per weight."""
        if not self._buffers:
            self._buffers = [torch.empty(self._numel, dtype=torch.bool, device=self.device) for _ in range(2)]
        self._buffers.reverse()  # the spare buffer becomes the current one
        flat = self._buffers[0]
        torch.cat([m.reshape(-1) for m in masks], out=flat)
        out, at = [], 0
        for m in masks:
            out.append(flat[at : at + m.numel()].view(m.shape))
            at += m.numel()
        return out

    def _count_flips(self, old: list[torch.Tensor], new: list[torch.Tensor]) -> torch.Tensor:
        """Mask entries that changed from ``old`` to ``new`` (views of the two flat buffers): one
        compare of the buffers, a device scalar."""
        return torch.count_nonzero(self._buffers[0] != self._buffers[1])

    @property
    def flip_rates(self) -> list[float]:
        """Fraction of mask entries changed at each regeneration after the first (reads the device)."""
        if self._flip_counts:
            counts = torch.stack(self._flip_counts).tolist()
            self._flip_rates.extend(c / self._numel for c in counts)
            self._flip_counts.clear()
        return list(self._flip_rates)

    @property
    def mask_times_ms(self) -> list[float]:
        """Time of each regeneration in ms (waits for pending CUDA events)."""
        for start, end in self._mask_events:
            end.synchronize()
            self._mask_times_ms.append(start.elapsed_time(end))
        self._mask_events.clear()
        return list(self._mask_times_ms)

    @property
    def mask_time_ms(self) -> float:
        """Total time spent regenerating masks, ms."""
        return float(sum(self.mask_times_ms))

    # training --------------------------------------------------------------------------------

    def step_async(self, tokens: torch.Tensor) -> torch.Tensor:
        """One training step; returns the loss as a detached device scalar (no host sync)."""
        if tokens.device != self.device:
            tokens = tokens.to(self.device, non_blocking=True)
        if self.step_index % self.every == 0:
            self.regenerate()
        out = train_step(
            self.model,
            self.optimizer,
            tokens,
            None,
            loss_fn=lambda _model, x, _y: self.loss_fn(x),
            grad_clip=None,
            grad_norm=False,
            amp_dtype=torch.bfloat16 if self.autocast else None,
            autocast_cache=True,
        )
        self.apply_masks()
        self.step_index += 1
        return out.loss

    def step(self, tokens: torch.Tensor) -> float:
        """One training step; returns the loss (float: waits for the device)."""
        return float(self.step_async(tokens).item())


def time_training_steps(
    trainer: MaskedTrainer,
    tokens: torch.Tensor,
    steps: int,
    warmup: int,
    *,
    progress_every: int | None = None,
) -> dict:
    """Time ``steps`` training steps after ``warmup`` untimed ones.

    CUDA: one pair of CUDA events around each step, no host sync inside the timed loop, one
    ``synchronize`` before and after it. CPU: ``perf_counter`` per step. Masks regenerate on their
    schedule throughout (take ``steps`` a multiple of ``trainer.every`` so the timed window holds
    a whole number of regeneration periods). ``ms_per_step`` is the median over all timed steps,
    which for k > 2 is a step *without* regeneration; ``ms_per_step_mean`` and
    ``mask_ms_per_step`` (regeneration time amortised over the window) carry the mask cost.

    A progress line goes to stderr every ``progress_every`` steps (default: about 10 lines for runs
    of 20 steps or more, none for shorter ones; host time, which on a GPU runs ahead of the device).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    cuda = trainer.device.type == "cuda"
    tokens = tokens.to(trainer.device)
    total = warmup + steps
    if progress_every is None:
        progress_every = max(1, total // 10) if total >= 20 else 0
    t_begin = time.perf_counter()

    def progress(i: int, loss: torch.Tensor) -> None:
        if progress_every and ((i + 1) % progress_every == 0 or i + 1 == total):
            phase = "warmup" if i < warmup else "timed"
            extra = "" if cuda else f"  loss {loss.item():.4f}"
            print(
                f"[train] step {i + 1}/{total} ({phase})  {time.perf_counter() - t_begin:7.1f}s{extra}",
                file=sys.stderr,
                flush=True,
            )

    for i in range(warmup):
        progress(i, trainer.step_async(tokens))
    if cuda:
        torch.cuda.synchronize(trainer.device)
    mask_before = trainer.mask_time_ms
    regen_before = len(trainer.regeneration_steps)

    regen_flags: list[bool] = []
    losses: list[torch.Tensor] = []
    host_ms: list[float] = []
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    for j in range(steps):
        regen_flags.append(trainer.step_index % trainer.every == 0)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = trainer.step_async(tokens)
            end.record()
            events.append((start, end))
        else:
            t0 = time.perf_counter()
            loss = trainer.step_async(tokens)
            host_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss)
        progress(warmup + j, loss)
    if cuda:
        torch.cuda.synchronize(trainer.device)
        step_ms = [s.elapsed_time(e) for s, e in events]
    else:
        step_ms = host_ms
    mask_ms = trainer.mask_time_ms - mask_before
    loss_values = torch.stack(losses).float().tolist()

    plain = [t for t, r in zip(step_ms, regen_flags, strict=True) if not r]
    regen = [t for t, r in zip(step_ms, regen_flags, strict=True) if r]
    median = statistics.median(step_ms)
    total_ms = sum(step_ms)
    return {
        "timer": "cuda-events" if cuda else "cpu-perf_counter",
        "device": str(trainer.device),
        "steps": steps,
        "warmup": warmup,
        "every": trainer.every,
        "regenerations": len(trainer.regeneration_steps) - regen_before,
        "ms_per_step": median,
        "ms_per_step_mean": total_ms / steps,
        "ms_per_step_min": min(step_ms),
        "ms_per_step_max": max(step_ms),
        "ms_per_step_no_regen": statistics.median(plain) if plain else float("nan"),
        "ms_per_step_regen": statistics.median(regen) if regen else float("nan"),
        "mask_ms_total": mask_ms,
        "mask_ms_per_step": mask_ms / steps,
        "mask_share": mask_ms / total_ms if total_ms > 0 else float("nan"),
        "tokens_per_step": tokens.numel(),
        "tokens_per_s": tokens.numel() / (median / 1e3) if median > 0 else float("inf"),
        "loss_first": loss_values[0],
        "loss_last": loss_values[-1],
    }
