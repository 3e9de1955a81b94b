"""Runs as directories, so a run survives the machine and Snakemake can depend on it.

``results/<device-slug>/runs/<run-id>/``:

- ``config.json``: the ``TrainConfig`` (a later call with another config is refused);
- ``provenance.json``: commit, GPU, versions and command of the first call, and one entry per call;
- ``log.csv``: one row per optimizer step (``repro.train.logs.log_columns``);
- ``val.csv``: step, tokens, val_loss at every ``eval_every`` steps and at the end;
- ``checkpoint.pt``: the state after the last step trained (``repro.train.checkpoint``);
- ``summary.json``: written when the run has finished (status, final losses, median tokens/s, MFU).

``ensure_run`` trains only what is missing: a finished run is a no-op; a stopped one resumes.
"""

from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from repro.data import DataError, TokenFile
from repro.provenance import device_slug, provenance
from repro.results import InputError, results_root
from repro.train.checkpoint import atomic_write_text, check_config
from repro.train.config import TrainConfig
from repro.train.loop import check_stops, train
from repro.train.parts import check_windows, resolve_data

__all__ = ["ensure_run", "read_summary", "run_dir_for", "run_id", "summarise"]


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def run_id(cfg: TrainConfig, world: int | None = None) -> str:
    """``<model>-<mode>-s<seed>-<hash of the config>``, and ``-w<N>`` for N > 1 processes (default:
    torchrun's ``WORLD_SIZE``): the global batch is ``batch_size * N``, so N processes train
    another run than one does, and must not find its folder finished."""
    h = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    world = _world() if world is None else world
    return f"{cfg.model}-{cfg.mode}-s{cfg.seed}-{h}" + (f"-w{world}" if world > 1 else "")


def _check_world(run_dir: Path, world: int) -> None:
    """Refuse to continue (or report as finished) a run trained with another number of processes:
    its batches, so its losses, are another run's. Read from the calls ``provenance.json`` records."""
    try:
        calls = json.loads((run_dir / "provenance.json").read_text()).get("calls", [])
        before = sorted({int(c.get("world_size", 1)) for c in calls if isinstance(c, dict)})
    except (OSError, ValueError, AttributeError, TypeError):
        return  # no readable record: nothing to compare with
    if before and before != [world]:
        raise DataError(
            f"{run_dir} was trained with {'/'.join(map(str, before))} process(es) and this call has {world}: "
            f"the global batch (batch_size x processes) differs, so would the run; use another --run-dir "
            "(the default folder names the process count)"
        )


def run_dir_for(cfg: TrainConfig, device: torch.device | None = None, root: Path | None = None) -> Path:
    """Where ``cfg``'s run lives on ``device`` (default: the GPU if there is one)."""
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return Path(root or results_root()) / device_slug(device) / "runs" / run_id(cfg)


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's summary.json, or None while it has not finished."""
    p = Path(run_dir) / "summary.json"
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _record_call(run_dir: Path, device: torch.device, max_minutes: float | None) -> None:
    path = run_dir / "provenance.json"
    prov = provenance(device)
    try:
        doc = json.loads(path.read_text()) if path.exists() else {**prov, "calls": []}
        if not isinstance(doc, dict) or not isinstance(doc.get("calls"), list):
            raise ValueError("no list of calls")
    except (OSError, ValueError) as exc:  # keep what was there (never lose a run's history), start anew
        kept = path.with_name(f"provenance.unreadable-{_dt.datetime.now().strftime('%Y%m%dT%H%M%S%f')}.json")
        os.replace(path, kept)
        print(f"[train] {path} was unreadable ({exc}); kept as {kept.name}, a new one started", file=sys.stderr)
        doc = {**prov, "calls": [], "earlier_provenance_unreadable": kept.name}
    doc["calls"].append(
        {
            "timestamp": prov["timestamp"],
            "command": prov["command"],
            "git_commit": prov["git_commit"],
            "gpu_name": prov["gpu_name"],
            "world_size": _world(),
            "max_minutes": max_minutes,
        }
    )
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")


def _column(path: Path, name: str) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return [(int(r["step"]), float(r[name])) for r in csv.DictReader(fh) if r.get(name) not in (None, "")]


def summarise(cfg: TrainConfig, run_dir: Path, gemm_tflops: float, world: int = 1) -> dict[str, Any]:
    """The summary of a finished run, from its logs: final losses, median tokens/s, MFU against
    ``gemm_tflops`` (dense GEMM rate per GPU; 2:4 modes counted at their dense FLOPs)."""
    from repro.models.gpt2 import train_flops_per_token

    losses = _column(run_dir / "log.csv", "loss")
    tps = [v for _, v in _column(run_dir / "log.csv", "tokens_per_s") if math.isfinite(v)]
    val = _column(run_dir / "val.csv", "val_loss")
    med = statistics.median(tps[1:] or tps) if tps else float("nan")
    if cfg.arch == "llama":  # FAST Table I models (dense FLOPs of the widened model)
        from repro.models.llama import train_flops_per_token as llama_flops
        from repro.train.flexmask import llama_config

        flops = llama_flops(llama_config(cfg.model, cfg.mask, cfg.seq_len), cfg.seq_len)
    else:
        flops = train_flops_per_token(cfg.gpt2(), cfg.seq_len)
    mfu = med * flops / (gemm_tflops * 1e12 * world) if gemm_tflops > 0 else float("nan")
    tail = [v for _, v in losses[-max(1, len(losses) // 20) :]]
    return {
        "status": "finished",
        "run_id": run_dir.name,
        "steps": cfg.steps,
        "tokens": cfg.steps * cfg.batch_size * cfg.grad_accum * cfg.seq_len * world,
        "world_size": world,
        "final_val_loss": val[-1][1] if val else None,
        "final_train_loss": statistics.fmean(tail) if tail else None,
        "median_tokens_per_s": med,
        "train_flops_per_token": flops,
        "gemm_tflops": gemm_tflops,
        "mfu": mfu,
        "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def corpus_files(cfg: TrainConfig) -> list[TokenFile]:
    """``cfg``'s train and val splits (DataError where the corpus is missing or broken)."""
    folder = resolve_data(cfg.data)
    return [TokenFile(folder, s) for s in ("train", "val")]


def corpus_identity(cfg: TrainConfig) -> dict[str, Any]:
    """The sha256 and token count of ``cfg``'s train and val splits (from the manifest)."""
    return {tf.split: tf.identity() for tf in corpus_files(cfg)}


def _check_finished_data(summary: dict[str, Any], cfg: TrainConfig, run_dir: Path) -> None:
    """A finished run recorded on another corpus than the one ``cfg.data`` holds now is refused (its
    results would be reported for data it never saw). Runs without the record, or a corpus that is
    gone, are not checked."""
    seen = summary.get("data")
    if seen is None:
        return
    try:
        now = corpus_identity(cfg)
    except InputError:
        return
    if now != seen:
        raise DataError(
            f"{run_dir} finished on another corpus than {cfg.data} holds now (recorded {seen}, now {now}); "
            "remove the run folder to train again on this one, or restore the corpus"
        )


def ensure_run(
    cfg: TrainConfig,
    run_dir: str | Path,
    *,
    max_minutes: float | None = None,
    stop_at: int | None = None,
    device: str | torch.device | None = None,
    gemm_tflops: float | None = None,
    progress: bool = True,
) -> str:
    """Train whatever of ``cfg``'s run in ``run_dir`` is missing; "finished" or "stopped" (deadline or
    ``stop_at``; call again to continue). ``gemm_tflops``: the dense GEMM rate for the MFU (measured
    when None)."""
    check_stops(stop_at, max_minutes)  # before anything is written
    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.json"
    if cfg_path.exists():
        check_config(TrainConfig.load(cfg_path).to_dict(), cfg, cfg_path)
    _check_world(run_dir, _world())
    summary = read_summary(run_dir)
    if summary is not None and summary.get("status") == "finished":
        _check_finished_data(summary, cfg, run_dir)
        return "finished"
    dev = torch.device(device) if device is not None else None
    # a missing corpus, or one too small for a window, fails before the run directory is made (a
    # half-made folder would refuse the fixed config)
    check_windows(corpus_files(cfg), cfg.seq_len)
    if _main_process():
        run_dir.mkdir(parents=True, exist_ok=True)
        if not cfg_path.exists():
            cfg.save(cfg_path)
        _record_call(run_dir, dev or _default_device(), max_minutes)
    res = train(cfg, run_dir, max_minutes=max_minutes, stop_at=stop_at, device=dev, progress=progress)
    if res.status == "finished" and _main_process():
        if gemm_tflops is None:
            from repro.roofline import measure_ceilings

            gemm_tflops = measure_ceilings(dev or _default_device()).gemm_tflops
        summary = summarise(cfg, run_dir, gemm_tflops, _world())
        summary["data"] = corpus_identity(cfg)
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return res.status
