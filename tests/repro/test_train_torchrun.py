"""``torchrun -m repro train`` as a user launches it: 2 CPU processes (gloo) train like 1 process
with the whole batch (same data, averaged gradients), and rank 0 alone writes the run folder."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repro.train import TrainConfig
from suites._pretrain import smoke_corpus

REPO = Path(__file__).resolve().parents[2]


def _losses(run: Path) -> list[float]:
    with open(run / "log.csv", newline="") as fh:
        return [float(r["loss"]) for r in csv.DictReader(fh)]


def _train(args: list[str], tmp: Path) -> None:
    # TRITON_INTERPRET=0: the dense run's flip tracker takes 2:4 masks of every weight each step,
    # which the interpreter ran in about 90 s a process (the kernels have their own tests)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "TRITON_INTERPRET": "0",
    }
    proc = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_torchrun_two_processes_match_one(tmp_path):
    corpus = smoke_corpus(tmp_path)
    cfg = TrainConfig(model="tiny", seq_len=16, batch_size=2, steps=3, warmup=1, lr=3e-3, eval_every=0,
                      eval_batches=1, checkpoint_every=0, amp="none", data=str(corpus), mode="dense")  # fmt: skip
    cfg.save(tmp_path / "cfg.json")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    _train([*torchrun, "-m", "repro", "train", "--config", "cfg.json", "--run-dir", "ddp", "--device", "cpu"], tmp_path)
    one = [sys.executable, "-m", "repro", "train", "--config", "cfg.json", "--set", "batch_size=4"]
    _train([*one, "--run-dir", "one", "--device", "cpu"], tmp_path)
    assert _losses(tmp_path / "ddp") == pytest.approx(_losses(tmp_path / "one"), rel=1e-5)
    # the same validation windows too (rank 0 alone had evaluated batch_size = 2 windows a batch)
    val = [json.loads((tmp_path / r / "summary.json").read_text())["final_val_loss"] for r in ("ddp", "one")]
    assert val[0] == pytest.approx(val[1], rel=1e-5)
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["tokens"] == 3 * 4 * 16
    assert len(json.loads((tmp_path / "ddp" / "provenance.json").read_text())["calls"]) == 1  # rank 0 only
