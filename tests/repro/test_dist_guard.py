"""A multi-rank run that fails (a rank raises, or hangs) fails everywhere within a bounded time,
names the rank, and writes nothing (``repro.dist_guard``): ``torchrun -m repro run`` and
``torchrun -m repro train`` on 2 CPU processes (gloo), with faults injected by the test-only
environment switches. Every launch runs in its own session and is killed whole past its bound."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.dist_guard import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, RankFailure, dist_timeout_s, inject_test_fault
from repro.results import JOURNAL_SUFFIX, read_journal

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
SUITE = "fast_figure3_e2e"


def _launch(args: list[str], cwd: Path, bound_s: float, **fault: str) -> tuple[int, str, float]:
    """Run ``args`` with the fault switches in ``fault``; (exit status, stdout + stderr, seconds).
    Past ``bound_s`` the whole session (torchrun and its ranks) is killed and the test fails."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **fault}
    env.pop("TRITON_INTERPRET", None)  # the CLI decides per suite, as for a user
    t0 = time.monotonic()
    proc = subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"still running after {bound_s} s (killed): {out[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):  # no rank outlives its launch (a hung one sleeps a day)
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, time.monotonic() - t0


def _run_suite(tmp: Path, bound_s: float, **fault: str) -> tuple[int, str, float]:
    cmd = [*TORCHRUN, "-m", "repro", "run", SUITE, "--profile", "smoke", "--device", "cpu"]
    return _launch([*cmd, "--results-dir", str(tmp / "results"), "--no-figure"], tmp, bound_s, **fault)


def _no_results(tmp: Path) -> None:
    """No results file; only rank 0's journal of the rows it finished, if any, marked partial when
    merged (``repro.results.ResultSet.start_journal``)."""
    written = [p for p in (tmp / "results").rglob("*") if p.is_file() and not p.name.endswith(JOURNAL_SUFFIX)]
    assert written == [], written


def test_timeout_from_the_environment(monkeypatch):
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert dist_timeout_s() == DEFAULT_TIMEOUT_S
    monkeypatch.setenv(TIMEOUT_ENV, "7.5")
    assert dist_timeout_s() == 7.5
    for bad in ("soon", "0", "-3"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=TIMEOUT_ENV):
            dist_timeout_s()


def test_fault_switches_fire_only_where_asked(monkeypatch):
    for name in ("REPRO_TEST_FAIL_RANK", "REPRO_TEST_HANG_RANK", "REPRO_TEST_FAULT_AT"):
        monkeypatch.delenv(name, raising=False)
    inject_test_fault("after_run")  # nothing set: nothing happens
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("REPRO_TEST_FAIL_RANK", "1")
    inject_test_fault("after_run")  # another rank's fault
    monkeypatch.setenv("REPRO_TEST_FAIL_RANK", "0")
    monkeypatch.setenv("REPRO_TEST_FAULT_AT", "before_run")
    inject_test_fault("after_run")  # another point
    with pytest.raises(RuntimeError, match="injected failure at before_run"):
        inject_test_fault("before_run")
    assert str(RankFailure(1, 2, "boom")) == "rank 1 of 2 failed: boom"


@pytest.mark.slow
def test_world_2_dry_run_writes_the_world_2_rows(tmp_path):
    """The multi-GPU entry point without faults: ``torchrun --nproc_per_node=2 -m repro run
    fast_figure3_e2e`` on 2 CPU processes (gloo) finishes and writes rows of world 2 only, once."""
    rc, out, _ = _run_suite(tmp_path, 300)
    assert rc == 0, out[-3000:]
    from repro.results import read_results

    df = read_results(tmp_path / "results" / "cpu" / f"{SUITE}.csv")
    steps = df[df["metric"] == "step_ms"]
    assert len(steps) and steps["shape"].str.endswith(" w2").all(), steps["shape"].unique()
    assert not steps.duplicated(["method", "variant", "shape"]).any()  # rank 0 wrote, once


def test_a_rank_that_raises_fails_the_run_and_nothing_is_written(tmp_path):
    """Rank 1 raises after its whole part of the run (every collective of the suite done), so rank
    0 has finished too: only the final agreement stops rank 0 from writing."""
    rc, out, _ = _run_suite(tmp_path, 150, REPRO_TEST_FAIL_RANK="1", REPRO_TEST_FAULT_AT="after_run")
    assert rc != 0, out[-3000:]
    assert "rank 1 of 2 failed" in out and "injected failure at after_run" in out, out[-3000:]
    assert "wrote" not in out
    _no_results(tmp_path)
    journal = tmp_path / "results" / "cpu" / f"{SUITE}.smoke{JOURNAL_SUFFIX}"
    assert len(read_journal(journal)) > 0  # rank 0 had finished its rows: kept, not written


@pytest.mark.slow
@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_failed_check_on_any_rank_keeps_nothing(tmp_path, rank):
    """A failed correctness check under torchrun reached the CLI as RankFailure, which kept rank
    0's journal of verified rows for a --partial merge; now nothing of the run is kept, whether the
    check failed on rank 0 or on a peer."""
    fault = dict(REPRO_TEST_FAIL_RANK=rank, REPRO_TEST_FAULT_AT="after_run", REPRO_TEST_FAIL_AS_CHECK="1")
    rc, out, _ = _run_suite(tmp_path, 150, **fault)
    assert rc != 0, out[-3000:]
    assert "injected failed check at after_run" in out, out[-3000:]
    left = [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    assert left == [], left


def test_a_rank_that_hangs_fails_the_run_within_the_timeout(tmp_path):
    """Rank 1 sleeps before the suite's first collective: rank 0 times out (5 s) instead of
    waiting forever, says it heard nothing from rank 1, and nothing is written."""
    rc, out, _ = _run_suite(
        tmp_path, 90, REPRO_TEST_HANG_RANK="1", REPRO_TEST_FAULT_AT="before_run", REPRO_DIST_TIMEOUT_S="5"
    )
    assert rc != 0, out[-3000:]
    # rank 1 sleeps a day: an exit with this message is rank 0's timeout (a hang is killed at 90 s and fails)
    assert "rank 0 of 2 failed" in out and "no word from rank(s) 1" in out, out[-3000:]
    _no_results(tmp_path)


def _train_cfg(tmp: Path) -> None:
    from repro.train import TrainConfig
    from suites._pretrain import smoke_corpus

    corpus = smoke_corpus(tmp)
    cfg = TrainConfig(model="tiny", seq_len=16, batch_size=2, steps=2, warmup=1, lr=3e-3, eval_every=0,
                      eval_batches=1, checkpoint_every=0, amp="none", data=str(corpus), mode="dense")  # fmt: skip
    cfg.save(tmp / "cfg.json")


@pytest.mark.slow
def test_a_training_run_whose_rank_hangs_at_the_end_is_not_marked_finished(tmp_path):
    """Rank 1 hangs after its last step: rank 0 (checkpoint saved, loop done) waits at most the
    timeout in the final monitored barrier, which names rank 1; no summary.json is written."""
    _train_cfg(tmp_path)
    cmd = [*TORCHRUN, "-m", "repro", "train", "--config", "cfg.json", "--run-dir", "ddp", "--device", "cpu"]
    rc, out, wall = _launch(
        cmd, tmp_path, 120, REPRO_TEST_HANG_RANK="1", REPRO_TEST_FAULT_AT="train_end", REPRO_DIST_TIMEOUT_S="5"
    )
    assert rc != 0, out[-3000:]
    assert "rank 0 of 2 failed" in out and "Ranks 1 failed to pass monitoredBarrier" in out, out[-3000:]
    assert not (tmp_path / "ddp" / "summary.json").exists()
    assert (tmp_path / "ddp" / "checkpoint.pt").exists()  # the work is kept: a later call resumes
    assert json.loads((tmp_path / "ddp" / "config.json").read_text())["steps"] == 2


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_lone_process_on_cuda_without_an_index_joins_nccl():
    """``repro run`` without torchrun passes the device "cuda" (no index); NCCL needs one (this
    failed on the H100: "Please use a device_id with index")."""
    import torch
    import torch.distributed as dist

    from repro.dist_guard import init_distributed

    assert init_distributed(torch.device("cuda"))
    try:
        t = torch.ones(1, device="cuda")
        dist.all_reduce(t)
        assert t.item() == 1.0
    finally:
        dist.destroy_process_group()
