"""profiles/slurm (untested on a cluster) loads: its keys are Snakemake options, its resources are
ones the SLURM executor plugin reads, and it asks for the full profile; ``--config world=N`` makes
the workflow launch fast_figure3_e2e under torchrun with N processes and gpu=N (a dry run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "slurm"
# Resources snakemake-executor-plugin-slurm 2.x turns into sbatch flags (its submit_string.py and
# utils.py), and Snakemake's own standard resources.
SLURM_RESOURCES = {
    "slurm_partition", "slurm_account", "slurm_extra", "runtime", "mem_mb", "mem_mb_per_cpu", "cpus_per_task",
    "cpus_per_gpu", "gpu", "gpu_model", "gres", "tasks", "tasks_per_gpu", "tasks_per_node", "nodes", "constraint",
    "qos", "clusters", "slurm_cluster",
}  # fmt: skip
STANDARD_RESOURCES = {"mem", "disk", "disk_mb", "tmpdir", "runtime", "threads"}


def test_slurm_profile_keys_are_ones_snakemake_and_the_plugin_accept():
    from snakemake.cli import get_argument_parser

    cfg = yaml.safe_load((PROFILE / "config.yaml").read_text())
    options = {o for a in get_argument_parser()._actions for o in a.option_strings}
    assert {f"--{k}" for k in cfg} <= options, {k for k in cfg if f"--{k}" not in options}
    assert cfg["executor"] == "slurm"
    resources = set(cfg["default-resources"]) | {r for rs in cfg["set-resources"].values() for r in rs}
    assert resources <= SLURM_RESOURCES | STANDARD_RESOURCES, resources - SLURM_RESOURCES - STANDARD_RESOURCES
    rules = set(cfg["set-resources"])
    assert rules <= {"run_suite", "corpus", "dashboard"}  # rules of the Snakefile
    for path in cfg["configfiles"]:
        assert yaml.safe_load((REPO / path).read_text())["profile"] == "full"


def test_world_launches_the_distributed_suite_under_torchrun(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "snakemake", "-n", "-p", "fast_figure3_e2e", "table2", "--forceall"]
    cmd += ["--config", "world=4", "profile=smoke", "--cores", "1"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "-m torch.distributed.run --standalone --nproc-per-node 4 -m repro run fast_figure3_e2e" in out
    assert "gpu=4" in out
    table2 = [line for line in out.splitlines() if "repro run table2" in line]
    assert table2 and all("torch.distributed.run" not in line for line in table2)
