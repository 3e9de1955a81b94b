"""Checkpoints that resume bit for bit: model, optimizer, grad scaler, RNG states, step and data
position, the state of every sparse layer that ``state_dict`` leaves out (masks, flip references,
MVUE seeds, dense phase: ``sparse_state_dict``), the flip tracker's reference masks and the run's
``TrainConfig``. Written atomically (temporary file, fsync, rename): a kill mid-write leaves the
previous checkpoint intact. A resume under a different config is refused, naming the differences.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from repro.train.config import TrainConfig

__all__ = [
    "CHECKPOINT_FORMAT",
    "RESUME_FREE_KEYS",
    "atomic_write",
    "atomic_write_text",
    "check_config",
    "load_checkpoint",
    "restore",
    "save_checkpoint",
    "sparse_modules",
]

CHECKPOINT_FORMAT = 2
# config fields that may change between the calls of one run: they do not affect the trajectory
RESUME_FREE_KEYS = frozenset({"checkpoint_every"})


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[Any], None], mode: str = "wb") -> None:
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


def atomic_write_text(path: Path, text: str) -> None:
    """``atomic_write`` of a text file."""
    atomic_write(Path(path), lambda fh: fh.write(text), mode="w")


def rng_state() -> dict:
    """Every RNG a step may draw from (torch CPU and CUDA, Python, NumPy's global)."""
    keys, pos, has_gauss, cached = np.random.get_state()[1:]
    return {
        "torch": torch.get_rng_state(),
        # this process's device only: rank 0 writes the checkpoint and every rank restores it onto
        # its own device (all devices' states, restored by index, gave rank r a generator rank 0
        # never used)
        "cuda": [torch.cuda.get_rng_state()] if torch.cuda.is_available() else [],
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }


def set_rng_state(state: dict) -> None:
    """Inverse of ``rng_state``."""
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():  # older checkpoints hold every device's: [0] is the saver's
        torch.cuda.set_rng_state(cuda[0])
    random.setstate(state["python"])
    npst = state["numpy"]
    np.random.set_state(
        ("MT19937", npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"], npst["cached"])
    )


def sparse_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Modules (by name) with state outside ``state_dict`` that an exact resume needs."""
    return {
        name: m
        for name, m in model.named_modules()
        if callable(getattr(m, "sparse_state_dict", None)) and callable(getattr(m, "load_sparse_state_dict", None))
    }


def check_config(saved: dict | None, cfg: TrainConfig, where: Path) -> None:
    """Refuse to continue ``where`` under a config other than the one it was started with."""
    if saved is None:
        raise ValueError(f"{where} holds no TrainConfig: it was not written by repro.train; start a new run directory")
    now = cfg.to_dict()
    diffs = [
        f"{k}: {saved.get(k)!r} (saved) vs {now.get(k)!r} (now)"
        for k in sorted(set(saved) | set(now))
        if k not in RESUME_FREE_KEYS and saved.get(k) != now.get(k)
    ]
    if diffs:
        raise ValueError(
            f"cannot resume {where}: its config differs from this one ({'; '.join(diffs)}); "
            "use the run's config.json or start a new run directory"
        )


def save_checkpoint(
    path: Path,
    *,
    step: int,
    tokens: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    cfg: TrainConfig,
    scaler: torch.amp.GradScaler | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write the checkpoint of the state after optimizer step ``step`` (1-based count)."""
    state = {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "tokens": tokens,
        "model": model.state_dict(),
        "sparse": {name: m.sparse_state_dict() for name, m in sparse_modules(model).items()},
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": rng_state(),
        "config": cfg.to_dict(),
        "extra": extra or {},
    }
    atomic_write(Path(path), lambda fh: torch.save(state, fh))


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A checkpoint written by ``save_checkpoint``, on the CPU, weights_only."""
    p = Path(path)
    if p.is_dir():
        p = p / "checkpoint.pt"
    if not p.is_file():
        raise FileNotFoundError(f"no checkpoint at {p}")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # a torn or foreign file: say which
        raise ValueError(f"{p} is not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{p} is not a repro.train checkpoint (format {CHECKPOINT_FORMAT})")
    return ckpt


def restore(
    ckpt: dict,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    cfg: TrainConfig,
    where: Path,
    scaler: torch.amp.GradScaler | None = None,
) -> None:
    """Load ``ckpt`` into the objects (after ``check_config``); sparse state goes in after the weights
    (``load_state_dict`` makes SparseLinear recompute its mask from them)."""
    check_config(ckpt.get("config"), cfg, where)
    modules = sparse_modules(model)
    saved = ckpt.get("sparse") or {}
    if set(saved) != set(modules):
        raise ValueError(
            f"cannot resume {where}: its sparse layers {sorted(saved)} are not the model's {sorted(modules)}"
        )
    model.load_state_dict(ckpt["model"])
    for name, m in modules.items():
        m.load_sparse_state_dict(saved[name])
    optimizer.load_state_dict(ckpt["optimizer"])
    if scaler is not None and ckpt.get("scaler"):
        scaler.load_state_dict(ckpt["scaler"])
    set_rng_state(ckpt["rng"])
