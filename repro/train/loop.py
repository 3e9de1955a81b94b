"""The pretraining loop: ``train(cfg, run_dir)`` trains ``cfg`` in ``run_dir`` from its checkpoint
(or from scratch) until ``cfg.steps``, ``stop_at`` or the ``max_minutes`` deadline, whichever comes
first, then checkpoints. Single process, or one of ``torchrun --nproc_per_node=N`` (DDP; rank 0 writes).

Per step: dense phase of the sparse layers, learning rate (linear warm-up, cosine), this step's batch
(a function of (seed, step)), ``train_step``, the sparse layers' ``after_optimizer_step`` (mask
schedule), masked decay on the weights (``decay_on='weight'``), flip rates, the log row (read lazily),
validation and checkpoint when due, a progress line on stderr.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from repro.data import DataError
from repro.dist_guard import all_ranks_succeeded, inject_test_fault, rank_guard
from repro.results import InputError
from repro.train.checkpoint import load_checkpoint, restore, save_checkpoint
from repro.train.config import TrainConfig
from repro.train.flip import FlipTracker
from repro.train.logs import Pending, RunLog
from repro.train.parts import (
    Dist,
    TrainData,
    build_model,
    build_optimizer,
    evaluate,
    flip_layers,
    init_distributed,
    now,
    pick_device,
    sparse_layers,
    spread_mvue_seeds,
)
from repro.train.step import lr_at, train_step

__all__ = ["RunResult", "check_stops", "train"]

AMP = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}


def loss_scaler(amp: torch.dtype | None) -> torch.amp.GradScaler | None:
    """fp16 autocast's loss scaler (small fp16 gradients would underflow to zero); None otherwise."""
    return torch.amp.GradScaler("cuda") if amp == torch.float16 else None


@dataclass
class RunResult:
    """What one ``train`` call did: steps ``start_step + 1 .. end_step``; status finished or stopped."""

    status: str
    start_step: int
    end_step: int
    tokens: int
    losses: list[float]
    val_loss: float | None
    tokens_per_s: float
    wall_s: float


def check_stops(stop_at: object, max_minutes: object) -> None:
    """``stop_at`` a step >= 0 and ``max_minutes`` a finite number > 0 (or None): an InputError otherwise
    (a negative limit stopped after one step; NaN meant no limit)."""
    if stop_at is not None and (isinstance(stop_at, bool) or not isinstance(stop_at, int) or stop_at < 0):
        raise InputError(f"stop_at must be a step number >= 0, got {stop_at!r}")
    if max_minutes is not None:
        ok = not isinstance(max_minutes, bool) and isinstance(max_minutes, (int, float))
        if not ok or not math.isfinite(max_minutes) or max_minutes <= 0:
            raise InputError(f"max_minutes must be a finite number > 0, got {max_minutes!r}")


def train(
    cfg: TrainConfig,
    run_dir: str | Path,
    *,
    max_minutes: float | None = None,
    stop_at: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = True,
    progress_every_s: float = 10.0,
    on_step: Callable[[int], None] | None = None,
) -> RunResult:
    """Train ``cfg`` in ``run_dir`` (resuming its checkpoint.pt) to ``cfg.steps`` or until stopped.
    Under ``torchrun``: returns only once every rank has finished without error; otherwise raises
    ``RankFailure`` naming the rank (``repro.dist_guard``), so the caller marks nothing finished."""
    check_stops(stop_at, max_minutes)
    d = init_distributed(device)
    try:
        with rank_guard("repro train"):
            res = _train(
                cfg,
                Path(run_dir),
                d,
                max_minutes=max_minutes,
                stop_at=stop_at,
                device=device,
                progress=progress,
                progress_every_s=progress_every_s,
                on_step=on_step,
            )
            inject_test_fault("train_end")
            all_ranks_succeeded()
        return res
    finally:
        if d.owns_group:
            with contextlib.suppress(Exception):  # a failed run: the error above is the one to report
                dist.destroy_process_group()


RANKS_AGREE_EVERY = 20
"""Under torchrun the ranks agree on stopping every this many steps (an all-reduce and a host sync)."""


def past_deadline(now_s: float, step_s: float, deadline_s: float, *, steps_ahead: int) -> bool:
    """Whether a run must stop now to end by ``deadline_s``: true when ``steps_ahead`` more steps of
    ``step_s`` (and one step's margin) would pass it. Under torchrun the ranks decide only every
    :data:`RANKS_AGREE_EVERY` steps, so they look that far ahead (else a run overshot the deadline by
    up to 19 steps)."""
    return now_s + (steps_ahead + 1) * step_s >= deadline_s


def _train(
    cfg: TrainConfig,
    run_dir: Path,
    d: Dist,
    *,
    max_minutes: float | None,
    stop_at: int | None,
    device: str | torch.device | None,
    progress: bool,
    progress_every_s: float,
    on_step: Callable[[int], None] | None,
) -> RunResult:
    """The loop of :func:`train` on this rank, in the process group ``d`` describes."""
    t_begin = time.perf_counter()
    deadline = math.inf if max_minutes is None else t_begin + 60.0 * max_minutes
    if d.main:
        run_dir.mkdir(parents=True, exist_ok=True)
    device = pick_device(d, device)
    amp = AMP[cfg.amp] if device.type == "cuda" else None
    ckpt_path = run_dir / "checkpoint.pt"

    model = build_model(cfg, device)
    data = TrainData(cfg, d, device, getattr(model.cfg, "vocab_size", None) or model.cfg.vocab)  # GPT-2 / Llama
    optimizer = build_optimizer(cfg, model)
    scaler = loss_scaler(amp)
    layers = flip_layers(model)
    flips = FlipTracker(layers) if cfg.track_flip else FlipTracker({})
    sparse = sparse_layers(model)
    start = tokens = 0
    if ckpt_path.exists():
        ckpt = load_checkpoint(ckpt_path)
        restore(ckpt, model=model, optimizer=optimizer, cfg=cfg, where=ckpt_path, scaler=scaler)
        if ckpt["extra"].get("world", 1) != d.world:  # the batch shards, and so the data, would change
            raise ValueError(
                f"cannot resume {ckpt_path}: it ran on {ckpt['extra'].get('world', 1)} processes, not {d.world}"
            )
        seen = ckpt["extra"].get("data")  # checkpoints before this record: not checked
        if seen is not None and seen != data.identity:
            raise DataError(
                f"cannot resume {ckpt_path}: its corpus {cfg.data} was rebuilt with other tokens since "
                f"(recorded {seen}, now {data.identity}); train in a new run folder, or restore the corpus"
            )
        flips.load_state_dict(ckpt["extra"].get("flip", {}))
        start, tokens = int(ckpt["step"]), int(ckpt["tokens"])
        del ckpt
    spread_mvue_seeds(model, d.rank)  # after any restore: the checkpoint holds rank 0's seeds
    # broadcast_buffers=False: every buffer (masks, flip references) follows from the weights, which
    # DDP keeps equal; broadcasting rank 0's would also undo each rank's own MVUE seeds
    ddp_ids = [device.index] if device.type == "cuda" else None
    step_model = DDP(model, device_ids=ddp_ids, broadcast_buffers=False) if d.world > 1 else model
    if cfg.compile:
        step_model = torch.compile(step_model)
    log = RunLog(run_dir, list(layers), start, enabled=d.main)
    end = cfg.steps if stop_at is None else max(start, min(stop_at, cfg.steps))  # at or before start: no step
    step_tokens = cfg.batch_size * cfg.grad_accum * cfg.seq_len * d.world
    val_loss, step, t_last, t_prev = None, start, t_begin, time.perf_counter()
    if progress and d.main:
        what = f"resuming at step {start}" if start else "starting"
        steps = f"steps {start + 1}..{end}" if end > start else f"no step (stop_at {stop_at} is not past step {start})"
        print(f"[train] {run_dir.name}: {what}, {steps} of {cfg.steps} on {device}", file=sys.stderr)

    def save(at: int) -> None:
        log.flush(sync=True)
        if d.main:
            extra = {"flip": flips.state_dict(), "world": d.world, "data": data.identity}
            save_checkpoint(
                ckpt_path, step=at, tokens=tokens, model=model, optimizer=optimizer, cfg=cfg, scaler=scaler, extra=extra
            )

    try:
        for step in range(start, end):
            for m in sparse:  # dense fine-tuning (last fraction) or dense pre-training (first)
                if m.is_dense != cfg.dense_at(step):
                    m.set_dense(cfg.dense_at(step))
            lr = lr_at(step, steps=cfg.steps, lr=cfg.lr, warmup=cfg.warmup, min_lr_ratio=cfg.min_lr_ratio)
            for g in optimizer.param_groups:
                g["lr"] = lr
            x, y = data.batch(step)
            decay_masks = [(m.weight, m.mask) for m in sparse if not m.is_dense] if cfg.weight_decay_masked else []
            t0 = now(device)
            out = train_step(
                step_model,
                optimizer,
                x,
                y,
                grad_accum=cfg.grad_accum,
                grad_clip=cfg.grad_clip or None,
                amp_dtype=amp,
                scaler=scaler,  # fp16: without loss scaling small gradients underflow to zero
            )
            for m in model.modules():
                if hasattr(m, "after_optimizer_step"):
                    m.after_optimizer_step(step + 1, cfg.steps)
            with torch.no_grad():  # masked decay on the weights (Hu et al. Eq. 8), for the Fig. 2 ablation
                for w, mask in decay_masks:
                    w.mul_(torch.where(mask, 1.0, 1.0 - lr * cfg.weight_decay_masked))
            loss = out.loss
            if d.world > 1:  # log the mean over all ranks' sequences (no host sync)
                loss = loss.clone()
                dist.all_reduce(loss, op=dist.ReduceOp.SUM)
                loss = loss / d.world
            rates = flips.measure()
            tokens += step_tokens
            log.add(Pending(step + 1, tokens, step_tokens, lr, loss, out.grad_norm, rates, t0, now(device)))
            if on_step is not None:
                on_step(step + 1)
            if step + 1 == cfg.steps or (cfg.eval_every and (step + 1) % cfg.eval_every == 0):
                val_loss = evaluate(model, data, cfg.eval_batches, amp)  # every rank: its slice of each batch
                if d.main:
                    log.val(step + 1, tokens, val_loss)
            t = time.perf_counter()
            late = past_deadline(t, t - t_prev, deadline, steps_ahead=1 if d.world == 1 else RANKS_AGREE_EVERY)
            if d.world > 1 and (step + 1) % RANKS_AGREE_EVERY == 0:  # every rank must stop at the same step
                flag = torch.tensor([float(late)], device=device)
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                late = bool(flag.item())
            elif d.world > 1:
                late = False
            t_prev = t
            if late or (cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0 and step + 1 != end):
                save(step + 1)
            if progress and d.main and (t - t_last >= progress_every_s or step + 1 == end):
                t_last = t
                log.drain(block=True)  # this step's loss and time (else the first line shows nan)
                tps = log.median_tokens_per_s()
                eta = (end - step - 1) * step_tokens / tps if tps > 0 else math.nan
                print(
                    f"[train] step {step + 1}/{cfg.steps}  loss {log.last_loss:.4f}  {tps:,.0f} tok/s  "
                    f"elapsed {_hms(t - t_begin)}  ETA {_hms(eta)}",
                    file=sys.stderr,
                    flush=True,
                )
            if late:
                step += 1
                break
        else:
            step = end
            if end > start:
                save(end)
    finally:
        with contextlib.suppress(Exception):  # an earlier error is the one to report
            log.flush(sync=True)
        log.close()
    status = "finished" if step >= cfg.steps else "stopped"
    return RunResult(
        status, start, step, tokens, log.losses, val_loss, log.median_tokens_per_s(), time.perf_counter() - t_begin
    )


def _hms(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
