"""The smoke workflow end to end: the real Snakemake, in a temporary copy of the repo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro.results import read_results

REPO = Path(__file__).resolve().parents[2]
COPY = ["Snakefile", "workflow", "profiles", "kernels", "repro", "suites"]


def _copy_repo(work: Path) -> None:
    """The parts of the repository a workflow run needs, copied into ``work``."""
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, work / name)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("wf")
    _copy_repo(work)
    env = {**os.environ, "PYTHONPATH": str(work), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("REPRO_RESULTS_DIR", None)
    env.pop("TRITON_INTERPRET", None)  # the CLI decides per suite, as for a user
    cmd = [sys.executable, "-m", "snakemake", "all", "--config", "profile=smoke", "--cores", "1"]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return work, proc


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["table2", "table3", "figure3", "pivot_comm", "figure6", "table8"])
def test_smoke_workflow_outputs(smoke_run, suite):
    work, proc = smoke_run
    df = read_results(work / "results" / "cpu" / f"{suite}.csv")
    assert set(df["profile"]) == {"smoke"} and set(df["device"]) == {"cpu"}
    assert set(df["timer"]) <= {"cpu-perf_counter", ""}
    # every row is verified, except the ones whose value no check stands behind (a training
    # step's time: only its loss was checked; a compiled run's compile time: the wall time of its
    # first step, which compiles it)
    unchecked = df[~df["verified"]]
    assert set(unchecked["metric"]) <= {"step_time", "mask_time_per_step", "compile_time"}, set(unchecked["metric"])
    assert df["verified"].any()
    assert df["value"].notna().all() and df["git_commit"].ne("").all()
    assert any(m == "time" or m.endswith("_time") for m in set(df["metric"]))
    assert (df["gpu_name"] == "none").all()
    for ext in ("png", "svg"):
        assert (work / "figures" / "cpu" / f"{suite}.{ext}").stat().st_size > 1000
    log = (work / "logs" / "cpu" / "smoke" / f"{suite}.log").read_text()
    assert "paper vs ours" in log


def test_dry_run_and_lint():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "table2", "table3"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr[-2000:]
    lint = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert lint.returncode == 0, lint.stdout[-2000:] + lint.stderr[-2000:]


@pytest.mark.slow
def test_cli_compare_and_list_on_stored_results(smoke_run):
    work, _ = smoke_run
    env = {**os.environ, "PYTHONPATH": str(work), "CUDA_VISIBLE_DEVICES": ""}
    run = lambda *a: subprocess.run(
        [sys.executable, "-m", "repro", *a],
        cwd=work,
        env=env,  # noqa: E731
        capture_output=True,
        text=True,
        timeout=300,
    )
    listed = run("list")
    assert listed.returncode == 0 and "table2" in listed.stdout and "table3" in listed.stdout
    cmp = run("compare", "table2", "--results-dir", str(work / "results"))
    assert cmp.returncode == 0 and "paper vs ours" in cmp.stdout and "30768x8192" in cmp.stdout
    missing = run("compare", "table2", "--results-dir", str(work / "nowhere"))
    assert missing.returncode == 1 and "no results" in missing.stderr
    bad = run("run", "table9")
    assert bad.returncode != 0 and "unknown suite" in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "suite",
    ["figure1", "figure2", "hu_figure3", "figure10", "hu_table1", "table5", "table7", "hu_table4", "hu_table5_glue",
     "hu_table7_glue"],
)  # fmt: skip
def test_smoke_workflow_training_outputs(smoke_run, suite):
    """Each training-dynamics suite's smoke profile trains its runs (tiny model, smoke corpus) and
    writes rows, a figure and paper vs ours; its runs sit in results/cpu/runs/smoke-<run-id>."""
    work, _ = smoke_run
    df = read_results(work / "results" / "cpu" / f"{suite}.csv")
    assert set(df["profile"]) == {"smoke"} and df["value"].notna().all()
    runs = df.loc[df["metric"] == "val_loss", "variant"]
    assert len(runs) or suite == "hu_table1"
    for rid in runs:
        d = work / "results" / "cpu" / "runs" / f"smoke-{rid}"
        assert (d / "summary.json").exists() and (d / "log.csv").exists() and (d / "val.csv").exists()
    for ext in ("png", "svg"):
        assert (work / "figures" / "cpu" / f"{suite}.{ext}").stat().st_size > 1000
    assert "paper vs ours" in (work / "logs" / "cpu" / "smoke" / f"{suite}.log").read_text()


def _planned(work: Path, targets: list[str]) -> set[str]:
    """Suites whose run ``snakemake -n TARGETS`` plans (from the stamp files it would write)."""
    env = {**os.environ, "PYTHONPATH": str(work), "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "snakemake", "-n", *targets, "--config", "profile=smoke", "--cores", "1"]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    return {t for t in targets if f"smoke/{t}.done" in out}


def test_touching_model_code_reruns_the_training_suites_only(tmp_path):
    """A suite's inputs are every file behind its numbers (repro.deps): after its run, touching
    repro/models/gpt2.py or suites/_training_bench.py plans figure6 and table8 again, not table3."""
    work = tmp_path / "wf"
    work.mkdir()
    _copy_repo(work)
    stamps = work / ".snakemake-runs" / "cpu" / "smoke"
    stamps.mkdir(parents=True)
    suites = ["figure6", "table8", "table3"]
    for suite in suites:
        (stamps / f"{suite}.done").touch()  # as if each had run just now, after every source
    assert _planned(work, suites) == set()
    later = (stamps / "table3.done").stat().st_mtime + 10
    for changed in ("repro/models/gpt2.py", "suites/_training_bench.py"):
        os.utime(work / changed, (later, later))
        assert _planned(work, suites) == {"figure6", "table8"}, changed
        os.utime(work / changed, (later - 3600, later - 3600))


def test_alias_rules_are_the_suite_list():
    from suites import SUITES

    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--list-target-rules"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rules = set(proc.stdout.split())
    assert set(SUITES) <= rules and {"all", "dashboard"} <= rules


def test_unknown_target_names_the_close_ones_and_every_target():
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "figur3"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "unknown target 'figur3'. Did you mean figure3" in out, out[-2000:]
    assert "table8" in out and "dashboard" in out  # the list of targets


INFO = '{"conda_version": "24.7.1", "root_prefix": "/x", "conda_prefix": "/x", "envs_dirs": [], "platform": "linux-64"}'
FAKE_CONDA = f"""#!/bin/sh
case "$*" in
  *"info --json"*) echo '{INFO}';;
  *config*) echo '{{"get": {{"channel_priority": "strict"}}}}';;
  *) echo "conda 24.7.1";;
esac
"""


@pytest.mark.parametrize("conda", [False, True])
def test_jobs_run_in_the_conda_environment_under_use_conda(tmp_path, conda):
    """Under ``--use-conda`` a job's ``python`` is its environment's, not the host interpreter that
    runs Snakemake (which would bypass the environment without a word). A stand-in ``conda`` that
    answers Snakemake's checks lets a dry run print the commands."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "figure3", "--cores", "1"]
    if conda:
        (tmp_path / "conda").write_text(FAKE_CONDA)
        (tmp_path / "conda").chmod(0o755)
        env["PATH"] = f"{tmp_path}{os.pathsep}{env['PATH']}"
        cmd.append("--use-conda")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [
        ln.removeprefix("Shell command:").split()[0] for ln in proc.stdout.splitlines() if "-m repro run figure3" in ln
    ]
    assert runs, proc.stdout[-3000:]
    assert set(runs) == {"python" if conda else sys.executable}, runs
