"""The run's CSV logs: ``log.csv`` (one row per optimizer step) and ``val.csv`` (one row per
validation). Values arrive as device tensors and CUDA events and are read lazily (``drain``), so the
loop never waits for the GPU just to log; on resume, rows after the checkpoint's step (written by
the interrupted call) and torn last lines are dropped, so each step appears once.
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from repro.train.checkpoint import atomic_write

__all__ = ["LOG_COLUMNS", "VAL_COLUMNS", "RunLog", "log_columns"]

LOG_COLUMNS = ("step", "tokens", "loss", "lr", "grad_norm", "flip_rate")
"""Leading columns of log.csv; then ``flip_rate.<layer>`` per FFN linear, ``step_time_ms``, ``tokens_per_s``."""
VAL_COLUMNS = ("step", "tokens", "val_loss")


def log_columns(layers: list[str]) -> list[str]:
    """All columns of log.csv for FFN linears named ``layers``."""
    return [*LOG_COLUMNS, *(f"flip_rate.{n}" for n in layers), "step_time_ms", "tokens_per_s"]


def _truncate(path: Path, header: list[str], last_step: int) -> None:
    """Keep the complete rows with step <= last_step (rewritten atomically); refuse another header."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        got = next(reader, None)
        if got is None:
            return
        if got != header:
            raise ValueError(f"{path} has columns {got}, expected {header}: not this run's log")
        rows = []
        for row in reader:
            try:
                if len(row) == len(header) and int(row[0]) <= last_step:
                    rows.append(row)
            except ValueError:
                continue

    def write(fh: Any) -> None:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)

    atomic_write(path, write, mode="w")


@dataclass
class Pending:
    step: int
    tokens: int
    step_tokens: int
    lr: float
    loss: torch.Tensor
    grad_norm: torch.Tensor | None
    flips: torch.Tensor | None
    start: Any  # torch.cuda.Event or perf_counter seconds
    end: Any


def _fmt(v: float) -> str:
    return "" if not math.isfinite(v) else repr(float(v))


class RunLog:
    """Appends to ``log.csv`` / ``val.csv`` in ``run_dir`` (only where ``enabled``: rank 0)."""

    def __init__(self, run_dir: Path, layers: list[str], start_step: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self.header = log_columns(layers)
        self.flip_columns = 1 + len(layers)
        self.pending: deque[Pending] = deque()
        self.losses: list[float] = []
        self.times_ms: list[float] = []
        self.tokens_per_s: list[float] = []
        self.last_loss = float("nan")
        self._fh: dict[str, Any] = {}
        if not enabled:
            return
        for name, header in (("log.csv", self.header), ("val.csv", list(VAL_COLUMNS))):
            path = run_dir / name
            _truncate(path, header, start_step)
            new = not path.exists() or path.stat().st_size == 0
            fh = open(path, "a", newline="")  # noqa: SIM115 - closed in close()
            if new:
                csv.writer(fh).writerow(header)
            self._fh[name] = fh

    def add(self, rec: Pending) -> None:
        self.pending.append(rec)
        self.drain(block=False)

    def drain(self, block: bool) -> None:
        """Write the rows of finished steps (waiting for the device only if ``block``)."""
        while self.pending:
            r = self.pending[0]
            if isinstance(r.end, torch.cuda.Event):
                if not block and not r.end.query():
                    return
                r.end.synchronize()
                ms = r.start.elapsed_time(r.end)
            else:
                ms = (r.end - r.start) * 1e3
            self.pending.popleft()
            loss = float(r.loss.item())
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss is {loss} at step {r.step}: the run diverged")
            # a measured norm is written as is, inf or nan too (an fp16 step its scaler skipped); "" = not measured
            gnorm = repr(float(r.grad_norm.item())) if r.grad_norm is not None else ""
            flips = r.flips.tolist() if r.flips is not None else []
            tps = r.step_tokens / (ms / 1e3) if ms > 0 else float("nan")
            self.losses.append(loss)
            self.times_ms.append(ms)
            self.tokens_per_s.append(tps)
            self.last_loss = loss
            if self.enabled:
                # the flip columns (overall, then one per layer) stay in place when a step has none
                # (track_flip=False): a short row once shifted step_time_ms into a flip column, and a
                # resume dropped every such row as torn
                cells = [_fmt(f) for f in flips] + [""] * (self.flip_columns - len(flips))
                row = [r.step, r.tokens, repr(loss), repr(r.lr), gnorm, *cells]
                csv.writer(self._fh["log.csv"]).writerow([*row, f"{ms:.4f}", _fmt(tps)])

    def val(self, step: int, tokens: int, loss: float) -> None:
        if self.enabled:
            csv.writer(self._fh["val.csv"]).writerow([step, tokens, repr(loss)])

    def flush(self, sync: bool = False) -> None:
        self.drain(block=True)
        for fh in self._fh.values():
            fh.flush()
            if sync:
                os.fsync(fh.fileno())

    def median_tokens_per_s(self, skip: int = 1) -> float:
        """Median tokens/s of this call's steps (the first ``skip``, with compilation and warm-up, left out)."""
        vals = self.tokens_per_s[skip:] or self.tokens_per_s
        return statistics.median(vals) if vals else float("nan")

    def close(self) -> None:
        for fh in self._fh.values():
            fh.close()
        self._fh = {}
