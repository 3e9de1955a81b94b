"""Training loop for the GPT-2 / Llama sparse-training runs (speed: tokens/s; accuracy: loss curves).

``train(model, data, steps=...)`` runs AdamW (fused on CUDA) with gradient clipping and a cosine
learning-rate schedule with linear warm-up, bf16 autocast on CUDA (fp16 with a GradScaler; CPU runs
are always fp32), and:

- calls ``m.after_optimizer_step(step, total_steps)`` on every module of the model that defines it,
  after every optimizer step (the SparseLinear mask-schedule protocol). ``step`` counts optimizer
  steps taken so far, 1 after the first and ``total_steps`` after the last;
- logs one CSV row per step (``LOG_COLUMNS``): step (same 1-based count), loss, lr (of that step),
  grad_norm (before clipping), step_time_ms (CUDA events on a GPU, read lazily so the loop never
  waits for the device; ``perf_counter`` on a CPU), tokens_per_s, flip_rate (mean over the modules
  that report one: ``flip_rate_tensor`` where a module has it, read with the other lazy values,
  else ``flip_rate``; empty when there are none);
- writes an atomic checkpoint (model, optimizer, scheduler, grad scaler, step, RNG states, model
  config, training hyperparameters, and the ``sparse_state_dict()`` of every module that has one,
  keyed by module name) every ``checkpoint_every`` steps and at the end; ``resume=True`` continues
  from it with the same results as an uninterrupted run (bit for bit on the same device);
- prints a progress line (step/steps, loss, ms/step, ETA) to stderr every few seconds.

Data: a callable ``data(step) -> (x, y)`` (``synthetic_batches``, ``token_file_batches``: the batch
depends only on (seed, step), so a resumed run sees exactly the batches it would have seen) or an
iterator of ``(x, y)`` (on resume the first ``step`` batches are drawn and dropped).

Safety: a fresh run refuses to overwrite an existing log or checkpoint (pass ``resume=True`` to
continue them); on resume, log rows after the checkpoint's step (from the interrupted run) are
dropped, so the log holds each step once.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CHECKPOINT_NAME",
    "LOG_COLUMNS",
    "StepInfo",
    "SyntheticBatches",
    "TokenFileBatches",
    "TrainResult",
    "lm_loss",
    "load_checkpoint",
    "lr_at",
    "synthetic_batches",
    "token_file_batches",
    "train",
]

Batch = tuple[torch.Tensor, torch.Tensor]
BatchFn = Callable[[int], Batch]
LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]

LOG_COLUMNS = ("step", "loss", "lr", "grad_norm", "step_time_ms", "tokens_per_s", "flip_rate")
CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = 1
# Hyperparameters that fix the schedule: a resumed run must use the checkpoint's values.
_SCHEDULE_KEYS = ("steps", "lr", "min_lr_ratio", "warmup")


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def _check_pos_int(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def _step_rng(seed: int, step: int) -> np.random.Generator:
    """An RNG that depends only on (seed, step): the batch of a step never depends on earlier steps."""
    return np.random.default_rng(np.random.SeedSequence([seed, step]))


def _to_device(tok: np.ndarray, device: torch.device) -> Batch:
    t = torch.from_numpy(tok.astype(np.int64, copy=False))
    # From pinned memory on CUDA: a copy from pageable memory would synchronise the stream every step.
    t = t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t.to(device)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


class _StepIndexed:
    """Batches addressed by step (``self(step)``, so a resumed run sees the same data); iterating
    yields steps 0, 1, 2, ..."""

    def __call__(self, step: int) -> Batch:
        raise NotImplementedError

    def __iter__(self):
        step = 0
        while True:
            yield self(step)
            step += 1


class SyntheticBatches(_StepIndexed):
    """Uniform random tokens [batch, seq] and their next tokens, for speed runs (no I/O, no loss signal)."""

    def __init__(self, vocab: int, batch: int, seq: int, seed: int = 0, device: torch.device | str = "cpu") -> None:
        self.vocab = _check_pos_int("vocab", vocab)
        self.batch = _check_pos_int("batch", batch)
        self.seq = _check_pos_int("seq", seq)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        self.seed = seed
        self.device = torch.device(device)

    def __call__(self, step: int) -> Batch:
        tok = _step_rng(self.seed, step).integers(0, self.vocab, size=(self.batch, self.seq + 1))
        return _to_device(tok, self.device)


class TokenFileBatches(_StepIndexed):
    """Random windows of a flat token file (uint16/uint32 .bin, as nanoGPT's prepare scripts write).

    Each step draws ``batch`` window starts uniformly (with replacement) from (seed, step); the file
    is memory-mapped on first use, so the source is cheap to create and to pickle.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        batch: int,
        seq: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        dtype: str | np.dtype = "uint16",
    ) -> None:
        self.batch = _check_pos_int("batch", batch)
        self.seq = _check_pos_int("seq", seq)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        self.seed = seed
        self.device = torch.device(device)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.uint16), np.dtype(np.uint32)):
            raise ValueError(f"token file dtype must be uint16 or uint32, got {self.dtype}")
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"token file {self.path} does not exist (or is not a file)")
        size = self.path.stat().st_size
        if size % self.dtype.itemsize:
            raise ValueError(
                f"token file {self.path} has {size} bytes, not a multiple of {self.dtype.itemsize} ({self.dtype}): "
                "wrong dtype?"
            )
        self.n_tokens = size // self.dtype.itemsize
        if self.n_tokens < seq + 1:
            raise ValueError(
                f"token file {self.path} has {self.n_tokens} tokens; one training window needs seq + 1 = {seq + 1}"
            )
        self._data: np.ndarray | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_data"] = None
        return state

    def __call__(self, step: int) -> Batch:
        if self._data is None:
            self._data = np.memmap(self.path, dtype=self.dtype, mode="r")
        starts = _step_rng(self.seed, step).integers(0, self.n_tokens - self.seq, size=self.batch)
        tok = np.stack([self._data[s : s + self.seq + 1] for s in starts])
        return _to_device(tok, self.device)


def synthetic_batches(
    vocab: int, batch: int, seq: int, seed: int = 0, device: torch.device | str = "cpu"
) -> SyntheticBatches:
    """Random-token batch source for speed runs: ``source(step) -> (x, y)``, also iterable."""
    return SyntheticBatches(vocab, batch, seq, seed, device)


def token_file_batches(
    path: str | os.PathLike,
    batch: int,
    seq: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: str | np.dtype = "uint16",
) -> TokenFileBatches:
    """Batch source over a flat uint16/uint32 token file for real-corpus runs: ``source(step) -> (x, y)``."""
    return TokenFileBatches(path, batch, seq, seed, device, dtype)


# ---------------------------------------------------------------------------------------------
# schedule, optimizer, loss
# ---------------------------------------------------------------------------------------------


def lr_at(step: int, *, steps: int, lr: float, warmup: int, min_lr_ratio: float) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warm-up, then cosine to lr * min_lr_ratio."""
    return lr * _lr_factor(step, steps, warmup, min_lr_ratio)


def _lr_factor(step: int, steps: int, warmup: int, min_lr_ratio: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return min_lr_ratio + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - min_lr_ratio)


def _make_optimizer(
    model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float, device: torch.device
) -> torch.optim.AdamW:
    """AdamW; matrices (and embeddings) decay, biases and norm gains do not (GPT-2 / nanoGPT practice)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device.type == "cuda" and all(p.is_cuda and p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy of ``model(x)`` [B, T, V] against ``y`` [B, T], in float32."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


# ---------------------------------------------------------------------------------------------
# checkpoints and logs
# ---------------------------------------------------------------------------------------------


def _atomic_write(path: Path, write: Callable[[Any], None], mode: str = "wb") -> None:
    """Write through a temporary file in the same folder, fsync, then os.replace: never a torn file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the result the usual mode
        with os.fdopen(fd, mode, **({"newline": ""} if "b" not in mode else {})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _rng_state() -> dict:
    keys, pos, has_gauss, cached = np.random.get_state()[1:]
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        n = min(len(cuda), torch.cuda.device_count())
        for i in range(n):
            torch.cuda.set_rng_state(cuda[i], i)
    random.setstate(state["python"])
    npst = state["numpy"]
    np.random.set_state(
        ("MT19937", npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"], npst["cached"])
    )


def _model_config(model: nn.Module) -> dict | None:
    cfg = getattr(model, "cfg", None)
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    return None


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A checkpoint written by ``train`` (a checkpoint file or its folder), on the CPU, weights_only."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT_NAME
    if not p.is_file():
        raise FileNotFoundError(f"no checkpoint at {p}")
    ckpt = torch.load(p, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{p} is not a repro.train checkpoint (format {CHECKPOINT_FORMAT})")
    return ckpt


def _sparse_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Modules (by name) with state outside ``state_dict`` that an exact resume needs: those with
    ``sparse_state_dict`` / ``load_sparse_state_dict`` (SparseLinear: mask in use, flip reference,
    MVUE seed, dense phase; all non-persistent, so ``state_dict`` alone cannot restore them)."""
    return {
        name: m
        for name, m in model.named_modules()
        if callable(getattr(m, "sparse_state_dict", None)) and callable(getattr(m, "load_sparse_state_dict", None))
    }


def _check_sparse_state(modules: dict[str, nn.Module], saved: object, path: Path) -> dict[str, dict]:
    """The checkpoint's sparse states, refused (before anything is loaded) unless they cover exactly
    the model's sparse layers with the same modes: a partial restore would resume inexactly."""
    if saved is None:  # a checkpoint written before sparse state was saved
        if modules:
            raise ValueError(
                f"cannot resume {path} exactly: it holds no sparse-layer state (masks, MVUE seeds, dense "
                f"phase) but the model has sparse layers {sorted(modules)}; restart the run"
            )
        return {}
    if not isinstance(saved, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in saved.items()):
        raise ValueError(f"{path}: 'sparse' must map module names to sparse_state_dict() dicts")
    missing, extra = sorted(set(modules) - set(saved)), sorted(set(saved) - set(modules))
    if missing or extra:
        raise ValueError(
            f"cannot resume {path}: its sparse layers do not match the model's "
            f"(in the model only: {missing or 'none'}; in the checkpoint only: {extra or 'none'})"
        )
    for name, m in modules.items():
        mode = getattr(m, "mode", None)
        if mode is not None and saved[name].get("mode") != mode:
            raise ValueError(
                f"cannot resume {path}: sparse layer {name!r} has mode={mode!r}, "
                f"the checkpoint's has mode={saved[name].get('mode')!r}"
            )
    return saved


def _truncate_log(path: Path, last_step: int) -> None:
    """Keep the complete rows with step <= last_step (rewritten atomically); drop torn or later rows."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return
        if tuple(header) != LOG_COLUMNS:
            raise ValueError(f"log {path} has columns {header}, expected {list(LOG_COLUMNS)}: not a train() log")
        rows = []
        for row in reader:
            if len(row) != len(LOG_COLUMNS):
                continue
            try:
                step = int(row[0])
            except ValueError:
                continue
            if step <= last_step:
                rows.append(row)

    def write(fh) -> None:
        w = csv.writer(fh)
        w.writerow(LOG_COLUMNS)
        w.writerows(rows)

    _atomic_write(path, write, mode="w")


# ---------------------------------------------------------------------------------------------
# the loop
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class StepInfo:
    """What a step hook sees after step ``step`` (1-based); ``loss`` is a device scalar (reading it syncs)."""

    step: int
    total_steps: int
    loss: torch.Tensor
    lr: float
    model: nn.Module
    optimizer: torch.optim.Optimizer


@dataclasses.dataclass
class TrainResult:
    """Outcome of one ``train`` call: steps ``start_step + 1 .. end_step`` ran in it."""

    start_step: int
    end_step: int
    total_steps: int
    losses: list[float]
    step_times_ms: list[float]
    tokens_per_step: int
    wall_s: float
    timer: str
    checkpoint: Path | None
    log_csv: Path | None

    @property
    def finished(self) -> bool:
        return self.end_step >= self.total_steps

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")

    @property
    def ms_per_step(self) -> float:
        """Median step time of this call (the first step, with its warm-up, weighs no more than any other)."""
        return statistics.median(self.step_times_ms) if self.step_times_ms else float("nan")

    @property
    def tokens_per_s(self) -> float:
        ms = self.ms_per_step
        return self.tokens_per_step / (ms / 1e3) if ms > 0 else float("nan")


@dataclasses.dataclass
class _Record:
    step: int
    lr: float
    tokens: int
    loss: torch.Tensor
    grad_norm: torch.Tensor
    flip_host: tuple[float, int]  # sum, count of python-number flip rates
    flip_dev: torch.Tensor | None  # sum of tensor flip rates (a new tensor: a snapshot)
    flip_dev_n: int
    start: Any  # torch.cuda.Event or perf_counter seconds
    end: Any


def _fmt_time(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _validate(
    steps: object,
    lr: object,
    min_lr_ratio: object,
    warmup: object,
    weight_decay: object,
    betas: object,
    eps: object,
    grad_clip: object,
    amp_dtype: object,
    checkpoint_every: object,
    checkpoint_dir: object,
    resume: object,
    stop_at: object,
) -> None:
    _check_pos_int("steps", steps)
    for name, v in (("lr", lr), ("eps", eps)):
        if not isinstance(v, int | float) or isinstance(v, bool) or not (v > 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    if not isinstance(min_lr_ratio, int | float) or not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup <= steps:
        raise ValueError(f"warmup must be an int in [0, steps={steps}], got {warmup!r}")
    if not isinstance(weight_decay, int | float) or not (weight_decay >= 0 and math.isfinite(weight_decay)):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
    if (
        not isinstance(betas, tuple | list)
        or len(betas) != 2
        or not all(isinstance(b, int | float) and 0.0 <= b < 1.0 for b in betas)
    ):
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
    if grad_clip is not None and (not isinstance(grad_clip, int | float) or not grad_clip > 0):
        raise ValueError(f"grad_clip must be > 0 or None (no clipping), got {grad_clip!r}")
    if amp_dtype not in (None, torch.bfloat16, torch.float16):
        raise ValueError(f"amp_dtype must be torch.bfloat16, torch.float16 or None (fp32), got {amp_dtype!r}")
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be an int >= 0 (0: only at the end), got {checkpoint_every!r}")
    if checkpoint_every and checkpoint_dir is None:
        raise ValueError("checkpoint_every needs checkpoint_dir")
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs checkpoint_dir")
    if stop_at is not None and (isinstance(stop_at, bool) or not isinstance(stop_at, int) or not 1 <= stop_at <= steps):
        raise ValueError(f"stop_at must be an int in [1, steps={steps}] or None, got {stop_at!r}")


def train(
    model: nn.Module,
    data: BatchFn | Iterable[Batch],
    *,
    steps: int,
    lr: float = 6e-4,
    min_lr_ratio: float = 0.1,
    warmup: int | None = None,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.95),
    eps: float = 1e-8,
    grad_clip: float | None = 1.0,
    amp_dtype: torch.dtype | None = torch.bfloat16,
    device: torch.device | str | None = None,
    log_csv: str | os.PathLike | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    stop_at: int | None = None,
    progress: bool = True,
    progress_every_s: float = 5.0,
    step_hooks: Sequence[Callable[[StepInfo], None]] = (),
    loss_fn: LossFn | None = None,
    config: dict | None = None,
) -> TrainResult:
    """Train ``model`` for ``steps`` optimizer steps (see the module docstring).

    ``warmup`` defaults to min(2000, steps // 10) steps. ``stop_at`` ends this call after that
    step (checkpointing it) while the schedule still spans ``steps``: a run split over jobs.
    ``loss_fn(model, x, y)`` defaults to ``lm_loss``. ``config`` is stored in the checkpoint
    (default: ``model.cfg`` as a dict when it is a dataclass). ``device`` defaults to the model's.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 and warmup is None:
        warmup = min(2000, steps // 10)
    _validate(
        steps,
        lr,
        min_lr_ratio,
        warmup,
        weight_decay,
        betas,
        eps,
        grad_clip,
        amp_dtype,
        checkpoint_every,
        checkpoint_dir,
        resume,
        stop_at,
    )
    assert warmup is not None
    if not (callable(data) or isinstance(data, Iterable)):
        raise TypeError(f"data must be a callable step -> (x, y) or an iterable of (x, y), got {type(data).__name__}")
    hooks = list(step_hooks)
    for h in hooks:
        if not callable(h):
            raise TypeError(f"step_hooks must be callables taking a StepInfo, got {type(h).__name__}")
    loss_fn = lm_loss if loss_fn is None else loss_fn

    # device, optimizer, schedule -------------------------------------------------------------
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    device = torch.device(device)
    model.to(device)
    model.train()
    cuda = device.type == "cuda"
    use_autocast = cuda and amp_dtype is not None
    scaler = torch.amp.GradScaler("cuda") if cuda and amp_dtype == torch.float16 else None
    optimizer = _make_optimizer(model, float(lr), float(weight_decay), tuple(betas), float(eps), device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: _lr_factor(s, steps, warmup, float(min_lr_ratio))
    )
    params = [p for g in optimizer.param_groups for p in g["params"]]
    hook_modules = [m for m in model.modules() if callable(getattr(m, "after_optimizer_step", None))]
    hook_ids = {id(m) for m in hook_modules}
    flip_modules = [m for m in model.modules() if hasattr(m, "flip_rate") or id(m) in hook_ids]
    sparse_modules = _sparse_modules(model)
    hparams = {
        "steps": steps,
        "lr": float(lr),
        "min_lr_ratio": float(min_lr_ratio),
        "warmup": warmup,
        "weight_decay": float(weight_decay),
        "betas": [float(b) for b in betas],
        "eps": float(eps),
        "grad_clip": None if grad_clip is None else float(grad_clip),
        "amp_dtype": str(amp_dtype) if use_autocast else "none",
    }
    run_config = config if config is not None else _model_config(model)

    # checkpoint / resume -------------------------------------------------------------------------
    ckpt_path = Path(checkpoint_dir) / CHECKPOINT_NAME if checkpoint_dir is not None else None
    log_path = Path(log_csv) if log_csv is not None else None
    start = 0
    if ckpt_path is not None and ckpt_path.exists() and not resume:
        raise FileExistsError(f"checkpoint {ckpt_path} exists: pass resume=True to continue it, or remove it")
    if log_path is not None and not resume and log_path.exists() and log_path.stat().st_size > 0:
        raise FileExistsError(f"log {log_path} exists: pass resume=True to continue it, or remove it")
    if resume and ckpt_path is not None and ckpt_path.exists():
        ckpt = load_checkpoint(ckpt_path)
        saved = ckpt.get("train", {})
        bad = [k for k in _SCHEDULE_KEYS if k in saved and saved[k] != hparams[k]]
        if bad:
            diffs = ", ".join(f"{k}: checkpoint {saved[k]!r} vs now {hparams[k]!r}" for k in bad)
            raise ValueError(f"cannot resume {ckpt_path} with a different schedule ({diffs})")
        sparse = _check_sparse_state(sparse_modules, ckpt.get("sparse"), ckpt_path)
        model.load_state_dict(ckpt["model"])  # SparseLinear recomputes masks from the weights here...
        for name, m in sparse_modules.items():  # ...so its saved state goes in after
            try:
                m.load_sparse_state_dict(sparse[name])
            except KeyError as e:
                raise ValueError(f"cannot resume {ckpt_path}: sparse layer {name!r}: saved state lacks {e}") from e
            except (TypeError, ValueError) as e:
                raise ValueError(f"cannot resume {ckpt_path}: sparse layer {name!r}: {e}") from e
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if scaler is not None and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        _set_rng_state(ckpt["rng"])
        start = int(ckpt["step"])
        del ckpt
    end = steps if stop_at is None else stop_at

    def save_checkpoint(step: int) -> None:
        assert ckpt_path is not None
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "model": model.state_dict(),
            "sparse": {name: m.sparse_state_dict() for name, m in sparse_modules.items()},
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "rng": _rng_state(),
            "config": run_config,
            "train": hparams,
        }
        _atomic_write(ckpt_path, lambda fh: torch.save(state, fh))

    # data ------------------------------------------------------------------------------------
    if callable(data):
        get_batch: BatchFn = data
    else:
        it = iter(data)

        def get_batch(step: int) -> Batch:
            try:
                return next(it)
            except StopIteration:
                raise ValueError(f"data ran out at step {step + 1} of {steps}") from None

        for s in range(start):  # an iterator cannot seek: replay the batches already trained on
            get_batch(s)

    # log -------------------------------------------------------------------------------------
    log_fh = None
    log_writer = None
    if log_path is not None:
        if resume:
            _truncate_log(log_path, start)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        new = not log_path.exists() or log_path.stat().st_size == 0
        log_fh = open(log_path, "a", newline="")  # noqa: SIM115 - closed in the finally below
        log_writer = csv.writer(log_fh)
        if new:
            log_writer.writerow(LOG_COLUMNS)
            log_fh.flush()

    pending: deque[_Record] = deque()
    losses: list[float] = []
    times_ms: list[float] = []
    tokens_per_step = 0
    last_loss = float("nan")
    t_begin = time.perf_counter()
    t_last_progress = t_begin

    def drain(block: bool) -> None:
        """Read finished steps (without waiting unless ``block``) and write their log rows."""
        nonlocal last_loss
        while pending:
            r = pending[0]
            if cuda:
                if not block and not r.end.query():
                    break
                r.end.synchronize()
                ms = r.start.elapsed_time(r.end)
            else:
                ms = (r.end - r.start) * 1e3
            pending.popleft()
            loss = float(r.loss.item())
            gnorm = float(r.grad_norm.item())
            fsum, fn = r.flip_host
            if r.flip_dev is not None:
                fsum += float(r.flip_dev.item())
                fn += r.flip_dev_n
            flip = fsum / fn if fn else None
            losses.append(loss)
            times_ms.append(ms)
            last_loss = loss
            if log_writer is not None:
                tps = r.tokens / (ms / 1e3) if ms > 0 else float("nan")
                log_writer.writerow([r.step, loss, r.lr, gnorm, ms, tps, "" if flip is None else flip])

    def flush_log(sync: bool) -> None:
        if log_fh is not None:
            log_fh.flush()
            if sync:
                os.fsync(log_fh.fileno())

    def report(step: int, final: bool = False) -> None:
        recent = times_ms[-50:]
        ms = statistics.median(recent) if recent else (time.perf_counter() - t_begin) * 1e3 / max(1, step - start)
        eta = (end - step) * ms / 1e3
        tag = "done" if final else f"ETA {_fmt_time(eta)}"
        print(
            f"[train] step {step}/{steps}  loss {last_loss:.4f}  {ms:.1f} ms/step  "
            f"elapsed {_fmt_time(time.perf_counter() - t_begin)}  {tag}",
            file=sys.stderr,
            flush=True,
        )

    if progress:
        what = f"resuming at step {start}" if start else "starting"
        print(f"[train] {what}: steps {start + 1}..{end} of {steps} on {device}", file=sys.stderr, flush=True)

    autocast = (
        (lambda: torch.autocast(device_type="cuda", dtype=amp_dtype))
        if use_autocast
        else (lambda: contextlib.nullcontext())
    )
    step = start
    try:
        for s in range(start, end):
            batch = get_batch(s)
            if not (isinstance(batch, tuple | list) and len(batch) == 2):
                raise ValueError(f"a batch must be a tuple (x, y), got {type(batch).__name__}")
            x, y = batch
            if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
                raise TypeError("a batch must hold two tensors (x, y)")
            if x.dim() != 2 or x.shape != y.shape:
                raise ValueError(f"batch x, y must both be [batch, seq], got {tuple(x.shape)} and {tuple(y.shape)}")
            if x.device != device:
                x = x.to(device, non_blocking=True)
            if y.device != device:
                y = y.to(device, non_blocking=True)
            tokens_per_step = x.numel()
            lr_now = float(scheduler.get_last_lr()[0])

            if cuda:
                t0: Any = torch.cuda.Event(enable_timing=True)
                t0.record()
            else:
                t0 = time.perf_counter()
            with autocast():
                loss = loss_fn(model, x, y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
            else:
                loss.backward()
            if grad_clip is not None:
                gnorm = torch.nn.utils.clip_grad_norm_(params, float(grad_clip))
            else:
                grads = [p.grad for p in params if p.grad is not None]
                gnorm = torch.nn.utils.get_total_norm(grads) if grads else torch.zeros((), device=device)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step = s + 1
            for m in hook_modules:
                m.after_optimizer_step(step, steps)
            fsum, fn, fdev = 0.0, 0, []
            for m in flip_modules:
                # a device tensor where the module offers one (no host sync per layer per step)
                v = getattr(m, "flip_rate_tensor", None)
                v = getattr(m, "flip_rate", None) if v is None else v
                if v is None:
                    continue
                if isinstance(v, torch.Tensor):
                    fdev.append(v.detach().float().reshape(()).to(device))
                else:
                    fsum += float(v)
                    fn += 1
            if cuda:
                t1: Any = torch.cuda.Event(enable_timing=True)
                t1.record()
            else:
                t1 = time.perf_counter()
            pending.append(
                _Record(
                    step=step,
                    lr=lr_now,
                    tokens=x.numel(),
                    loss=loss.detach(),
                    grad_norm=gnorm.detach(),
                    flip_host=(fsum, fn),
                    flip_dev=torch.stack(fdev).sum() if fdev else None,
                    flip_dev_n=len(fdev),
                    start=t0,
                    end=t1,
                )
            )
            if hooks:
                info = StepInfo(step, steps, loss.detach(), lr_now, model, optimizer)
                for h in hooks:
                    h(info)
            drain(block=False)
            if ckpt_path is not None and checkpoint_every and step % checkpoint_every == 0 and step != end:
                drain(block=True)
                flush_log(sync=True)
                save_checkpoint(step)
            now = time.perf_counter()
            if progress and now - t_last_progress >= progress_every_s:
                flush_log(sync=False)
                report(step)
                t_last_progress = now
        drain(block=True)
        flush_log(sync=True)
        if ckpt_path is not None and step > start:
            save_checkpoint(step)
    finally:
        with contextlib.suppress(Exception):  # an earlier error is the one to report
            drain(block=True)
        if log_fh is not None:
            with contextlib.suppress(Exception):
                flush_log(sync=True)
            log_fh.close()
    wall = time.perf_counter() - t_begin
    if progress:
        report(step, final=True)
    return TrainResult(
        start_step=start,
        end_step=step,
        total_steps=steps,
        losses=losses,
        step_times_ms=times_ms,
        tokens_per_step=tokens_per_step,
        wall_s=wall,
        timer="cuda-events" if cuda else "cpu-perf_counter",
        checkpoint=ckpt_path if ckpt_path is not None and ckpt_path.exists() else None,
        log_csv=log_path,
    )
