"""Pretraining runs, nanoGPT-style: ``TrainConfig`` (config.py), ``train_step`` (step.py, shared with
table8 and the FAST masked trainer), checkpoints (checkpoint.py), the loop (loop.py) and run
directories (runs.py). ``python -m repro train --config cfg.json --run-dir DIR``.
"""

from repro.train.checkpoint import load_checkpoint
from repro.train.config import TrainConfig
from repro.train.flip import FlipTracker
from repro.train.logs import LOG_COLUMNS, VAL_COLUMNS, log_columns
from repro.train.loop import RunResult, train
from repro.train.runs import ensure_run, read_summary, run_dir_for, run_id
from repro.train.step import StepOutput, lm_loss, lr_at, make_optimizer, train_step

__all__ = [
    "LOG_COLUMNS",
    "VAL_COLUMNS",
    "FlipTracker",
    "RunResult",
    "StepOutput",
    "TrainConfig",
    "ensure_run",
    "lm_loss",
    "load_checkpoint",
    "log_columns",
    "lr_at",
    "make_optimizer",
    "read_summary",
    "run_dir_for",
    "run_id",
    "train",
    "train_step",
]
