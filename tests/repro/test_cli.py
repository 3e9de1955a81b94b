"""The command line refuses bad input with one clear line (exit code 2) instead of a traceback,
fails before a run when it could not store the run's results, and redraws only what was asked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import suites.table2
from repro.cli import main as cli_main

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "dashboard"
GPU = "nvidia-h100-80gb-hbm3"


@pytest.fixture
def no_env_leak(monkeypatch):
    """cmd_run sets these for its own process; keep them out of the other tests."""
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))
    monkeypatch.setenv("REPRO_RESULTS_DIR", os.environ.get("REPRO_RESULTS_DIR", str(REPO / "results")))


@pytest.fixture
def no_run(monkeypatch):
    """Any attempt to start the suite's work fails the test: the CLI must refuse first."""

    def boom(*_a, **_k):
        raise AssertionError("the run started although its results could not be written")

    monkeypatch.setattr("repro.roofline.measure_ceilings", boom)
    monkeypatch.setattr(suites.table2, "run", boom)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "mps", "meta"])
def test_run_unknown_device_is_one_line(tmp_path: Path, device: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "repro", "run", "table2", "--device", device, "--results-dir", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = _one_line(proc.stderr)
    assert repr(device) in line and "cpu" in line and "cuda" in line
    assert not any(tmp_path.iterdir())


def test_run_fails_fast_when_results_folder_cannot_be_created(tmp_path: Path, capsys, no_env_leak, no_run) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder", encoding="utf-8")
    rc = cli_main(["run", "table2", "--device", "cpu", "--results-dir", str(blocker / "results"), "--no-figure"])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "results" in line and str(blocker) in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_run_fails_fast_on_read_only_results_folder(tmp_path: Path, capsys, no_env_leak, no_run) -> None:
    ro = tmp_path / "results"
    (ro / "cpu").mkdir(parents=True)
    os.chmod(ro / "cpu", 0o555)
    try:
        rc = cli_main(["run", "table2", "--device", "cpu", "--results-dir", str(ro), "--no-figure"])
    finally:
        os.chmod(ro / "cpu", 0o755)
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and str(ro / "cpu") in line


def test_run_fails_fast_on_unwritable_figures_folder(tmp_path: Path, capsys, no_env_leak, no_run) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    args = ["run", "table2", "--device", "cpu", "--results-dir", str(tmp_path / "results")]
    rc = cli_main([*args, "--figures-dir", str(blocker / "figs")])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "figures" in line and str(blocker) in line
    assert not (tmp_path / "results" / "cpu" / "table2.csv").exists()


def test_run_fails_fast_on_corrupt_results_file(tmp_path: Path, capsys, no_env_leak, no_run) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "table2.csv").write_text("garbage\n", encoding="utf-8")
    rc = cli_main(["run", "table2", "--device", "cpu", "--results-dir", str(tmp_path), "--no-figure"])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "table2.csv" in line


def test_plot_redraws_only_the_named_suite_and_stored_devices(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    shutil.copytree(FIXTURE / "results", results)
    shutil.copyfile(results / "cpu" / "table2.csv", results / "cpu" / "other.csv")
    figs = tmp_path / "figures"
    assert cli_main(["plot", "table2", "--results-dir", str(results), "--figures-dir", str(figs)]) == 0
    made = sorted(str(p.relative_to(figs)) for p in figs.rglob("*") if p.is_file())
    assert made == [f"{d}/table2.{e}" for d in ("cpu", GPU) for e in ("png", "svg")]
    before = {p: p.read_bytes() for p in figs.rglob("*.*")}
    assert cli_main(["plot", "table2", "--results-dir", str(results), "--figures-dir", str(figs)]) == 0
    assert {p: p.read_bytes() for p in figs.rglob("*.*")} == before  # a redraw changes no byte
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("device", ["../../payload", "/tmp/repro-payload-test"])
def test_plot_refuses_escaping_device(tmp_path: Path, capsys, device: str) -> None:
    results = tmp_path / "results"
    shutil.copytree(FIXTURE / "results", results)
    csv = results / "cpu" / "table2.csv"
    csv.write_text(csv.read_text(encoding="utf-8").replace(",cpu,none,", f",{device},none,"), encoding="utf-8")
    figs = tmp_path / "a" / "figures"
    rc = cli_main(["plot", "table2", "--results-dir", str(results), "--figures-dir", str(figs)])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "table2.csv" in line and "device" in line
    assert not [p for p in tmp_path.rglob("*.png")]
    assert not Path("/tmp/repro-payload-test").exists()


def test_plot_one_device(tmp_path: Path, capsys) -> None:
    figs = tmp_path / "figures"
    base = ["plot", "table2", "--results-dir", str(FIXTURE / "results"), "--figures-dir", str(figs)]
    assert cli_main([*base, "--device", "cpu"]) == 0
    assert sorted(p.name for p in figs.rglob("*.*")) == ["table2.png", "table2.svg"]
    assert (figs / "cpu" / "table2.png").is_file()
    assert cli_main([*base, "--device", "../cpu"]) == 2
    assert "is not a device name" in _one_line(capsys.readouterr().err)


def test_compare_names_a_device_without_rows(capsys) -> None:
    """Before: an unknown --device printed nothing and exited 0, so a typo read as an empty table."""
    base = ["compare", "table2", "--results-dir", str(FIXTURE / "results")]
    assert cli_main([*base, "--device", "cpu"]) == 0
    assert "paper vs ours" in capsys.readouterr().out
    assert cli_main([*base, "--device", "nvidia-h200"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "no results for table2 on nvidia-h200" in line and f"stored devices: cpu, {GPU}" in line
    assert cli_main([*base, "--device", "../cpu"]) == 2
    assert "is not a device name" in _one_line(capsys.readouterr().err)


def test_compare_into_a_closed_pipe_stops_quietly() -> None:
    """``repro compare x | head -1``: the reader goes away; before, a BrokenPipeError traceback."""
    cmd = [sys.executable, "-m", "repro", "compare", "table2", "--results-dir", str(FIXTURE / "results")]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away after one line
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_full_profile_on_a_cpu_names_the_smoke_profile_in_both_front_ends() -> None:
    """Under Snakemake ``--profile`` is Snakemake's own option: the hint names ``--config profile=smoke`` too."""
    import torch

    from repro.suite import pick_profile

    with pytest.raises(SystemExit) as e:
        pick_profile("full", torch.device("cpu"))
    assert "--config profile=smoke" in str(e.value) and "--profile smoke" in str(e.value)
    assert pick_profile("auto", torch.device("cpu")) == "smoke"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_stopped_run_keeps_its_rows_and_says_so_without_a_traceback(tmp_path: Path, sig: str) -> None:
    """Ctrl-C or SIGTERM (a cancelled Snakemake job) after rows were finished: the journal stays, the
    merge command is printed, no traceback, exit 130 / 143 (SIGTERM used to end the run silently)."""
    import signal
    import time

    env = {**os.environ, "TRITON_INTERPRET": "1", "REPRO_TEST_HANG_RANK": "0", "REPRO_TEST_FAULT_AT": "after_run"}
    cmd = [sys.executable, "-m", "repro", "run", "table2", "--profile", "smoke", "--no-figure"]
    proc = subprocess.Popen(
        [*cmd, "--results-dir", str(tmp_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # a shell without job control starts background jobs with SIGINT ignored, and the run would
        # inherit that (CI launched with `&`): Ctrl-C's default is what this test is about
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline, err = time.monotonic() + 600, []
    try:
        for line in proc.stderr:  # every row is in the journal once the run hangs after its end
            err.append(line)
            if "hanging at after_run" in line or time.monotonic() > deadline:
                break
        proc.send_signal(getattr(signal, sig))
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # never leave the hang hook's 24 h sleep behind
            proc.kill()
            proc.wait()
    text = "".join(err) + rest
    assert proc.returncode == (130 if sig == "SIGINT" else 143), text
    assert "Traceback" not in text
    assert "finished rows are kept in" in text and "merge_results.py table2" in text
    assert ("interrupted" if sig == "SIGINT" else "terminated (SIGTERM)") in text.splitlines()[-1]
    assert list(tmp_path.rglob("*.partial"))


def test_compare_counts_rows_merged_from_a_stopped_run(capsys) -> None:
    import pandas as pd

    from repro.cli import _print_compare
    from repro.results import PARTIAL_MARK, read_results

    df = read_results(REPO / "results" / GPU / "table2.csv")
    df = df.assign(command=[c + (PARTIAL_MARK if i < 3 else "") for i, c in enumerate(df["command"].astype(str))])
    _print_compare(suites.table2, pd.DataFrame(df))
    assert f"partial: 3 of {len(df)} rows come from a run stopped before its end" in capsys.readouterr().out


def test_train_on_a_missing_gpu_is_refused_before_the_run_folder_is_made(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here")
    with pytest.raises(SystemExit, match="torch sees no CUDA GPU"):  # was an AssertionError traceback
        cli_main(["train", "--set", "model=gpt2-tiny", "--device", "cuda", "--run-dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()
