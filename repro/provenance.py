"""Where a number came from: device, software versions, commit and command of the run."""

from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    """stdout of ``git ARGS`` in the repository, stripped; "" where git fails or is absent."""
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


OUTPUTS = ("results", "figures", "logs", "site")
"""Folders the suites and the workflow write: their changes do not make the code dirty."""


@lru_cache(maxsize=1)
def git_commit() -> str:
    """Commit hash, suffixed ``-dirty`` when tracked files other than outputs differ from it;
    ``unknown`` outside git. Outputs (``results/``, ``figures/``, ``logs/``, ``site/``) do not count:
    a workflow's first suite writes them before the next starts, and Snakemake's ``tee`` empties a
    tracked log before the process starts, so every GPU run read ``-dirty`` from a clean checkout.

    ``REPRO_GIT_COMMIT`` overrides it for copies of the tree without ``.git`` (a remote GPU box).
    """
    if os.environ.get("REPRO_GIT_COMMIT"):
        return os.environ["REPRO_GIT_COMMIT"]
    sha = git("rev-parse", "HEAD")
    if not sha:
        return "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", *(f":(exclude){d}" for d in OUTPUTS))
    return sha + ("-dirty" if dirty else "")


def gpu_name(device: torch.device | None = None) -> str | None:
    if device is not None and device.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(device)


def device_slug(device: torch.device) -> str:
    """Folder name for results of this device: ``cpu`` or the GPU name, e.g. ``nvidia-h100-80gb-hbm3``."""
    name = gpu_name(device) if device.type == "cuda" else None
    if not name:
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def versions() -> dict[str, str]:
    try:
        import triton

        triton_v = triton.__version__
    except ImportError:  # pragma: no cover - triton is a dependency
        triton_v = "missing"
    try:
        cslt = torch.backends.cusparselt.version() if torch.backends.cusparselt.is_available() else None
    except AttributeError:
        cslt = None
    return {
        "torch": torch.__version__,
        "triton": triton_v,
        "cuda": torch.version.cuda or "none",
        "cusparselt": str(cslt) if cslt is not None else "none",
        "python": sys.version.split()[0],
    }


RUN_ENV_PREFIXES = ("REPRO_", "FAST_E2E_")
"""Environment variables of these prefixes choose or change what a run measures (models, batches,
compile mode, precision): the recorded command carries them, so that it reruns the same thing."""
LOCATION_ONLY_ENV = frozenset({"REPRO_GIT_COMMIT", "REPRO_RESULTS_DIR", "REPRO_DATA_CACHE"})
"""Ones that say where things are, not what is measured: left out of the command."""


def run_env() -> dict[str, str]:
    """The set variables of :data:`RUN_ENV_PREFIXES` that change a run, by name."""
    return {
        k: v for k, v in sorted(os.environ.items()) if k.startswith(RUN_ENV_PREFIXES) and k not in LOCATION_ONLY_ENV
    }


def invocation() -> str:
    """The command line of this process, ``python -m repro ...`` when run as a module, after the
    variables of :func:`run_env` (``REPRO_TABLE8_MODELS=gpt2-774m python -m repro run table8``)."""
    prog = Path(sys.argv[0]).name
    head = ["python", "-m", Path(sys.argv[0]).parent.name] if prog == "__main__.py" else [prog]
    env = [f"{k}={v}" for k, v in run_env().items()]
    return shlex.join([*env, *head, *sys.argv[1:]])


def provenance(device: torch.device, command: str | None = None) -> dict[str, str]:
    """One dict of provenance fields, stored on every result row."""
    v = versions()
    return {
        "git_commit": git_commit(),
        "device": device_slug(device),
        "gpu_name": gpu_name(device) or "none",
        "torch_version": v["torch"],
        "triton_version": v["triton"],
        "cuda_version": v["cuda"],
        "cusparselt_version": v["cusparselt"],
        "command": command if command is not None else invocation(),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
