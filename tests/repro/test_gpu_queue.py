"""scripts/gpu_queue.py, the job queue of a lent multi-GPU machine: jobs get disjoint GPUs, run in
file order with nothing overtaking a job that waits for GPUs, and every job's exit code and log
are kept (a failed job never stops the others)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_queue.py"


def test_queue_runs_jobs_in_order_on_disjoint_gpus(tmp_path):
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(
        "# a comment\n"
        "a | 1 | echo a $CUDA_VISIBLE_DEVICES; sleep 0.5\n"
        "b | 1 | echo b $CUDA_VISIBLE_DEVICES; exit 3\n"
        "big | 2 | echo big $CUDA_VISIBLE_DEVICES\n"
        "c | 1 | echo c $CUDA_VISIBLE_DEVICES\n"
    )
    env = dict(os.environ, GPU_QUEUE_GPUS="2")
    run = dict(cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert subprocess.run([sys.executable, str(SCRIPT), "start", str(jobs)], **run).returncode == 0
    assert subprocess.run([sys.executable, str(SCRIPT), "wait", "30"], **run).returncode == 0
    status = {j["name"]: j for j in json.loads((tmp_path / ".persist/queue/status.json").read_text())}
    assert {n: j["rc"] for n, j in status.items()} == {"a": 0, "b": 3, "big": 0, "c": 0}
    assert sorted(status["a"]["gpus_used"] + status["b"]["gpus_used"]) == [0, 1]
    assert status["big"]["gpus_used"] == [0, 1]
    logs = tmp_path / ".persist/queue/logs"
    assert "big 0,1" in (logs / "big.log").read_text()
    # c comes after big in the file, so it starts only once big has its GPUs (no overtaking)
    assert status["c"]["started"] >= status["big"]["started"]
    out = tmp_path / "out.tar.gz"
    assert subprocess.run([sys.executable, str(SCRIPT), "pack", str(out)], **run).returncode == 0
    assert out.stat().st_size > 0


def test_a_job_needing_more_gpus_than_the_machine_is_skipped_not_waited_for(tmp_path):
    """A 4-GPU job on a 2-GPU machine (a job file written for nvidia-h200-x4, run on an x2): it is
    skipped with its reason, and the jobs after it still run (first-in first-out would otherwise
    hold them behind it for the whole lease)."""
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("w4 | 4 | echo w4\nw2 | 2 | echo w2\nw1 | 1 | echo w1\n")
    env = dict(os.environ, GPU_QUEUE_GPUS="2")
    run = dict(cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert subprocess.run([sys.executable, str(SCRIPT), "start", str(jobs)], **run).returncode == 0
    assert subprocess.run([sys.executable, str(SCRIPT), "wait", "30"], **run).returncode == 0
    status = {j["name"]: j for j in json.loads((tmp_path / ".persist/queue/status.json").read_text())}
    assert status["w4"]["state"] == "skipped" and "needs 4 GPUs, the machine has 2" in status["w4"]["reason"]
    assert status["w2"]["rc"] == 0 and status["w1"]["rc"] == 0
    assert not (tmp_path / ".persist/queue/logs/w4.log").exists()


@pytest.mark.parametrize(
    "text, why",
    [
        ("a | two | echo a\n", "expected 'name | gpus | command'"),
        ("a | 1 | echo a\na | 1 | echo b\n", "must be unique"),
    ],
)
def test_a_bad_job_file_fails_before_anything_starts(tmp_path, text, why):
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(text)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "start", str(jobs)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and why in proc.stderr


def test_campaign_checks_its_needs_and_runs_jobs_in_a_snapshot(tmp_path):
    """scripts/gpu_campaign.sh: a job file's "# needs:" paths are checked before anything starts;
    the jobs run in a snapshot of the tree (.persist/tree), so a later call that replaces the tree's
    files cannot change what a running job reads; the archive holds what the jobs wrote."""
    import shutil
    import tarfile

    root = tmp_path / "tree"
    (root / "scripts" / "jobs").mkdir(parents=True)
    for name in ("gpu_queue.py", "gpu_campaign.sh"):
        shutil.copy(SCRIPT.parent / name, root / "scripts" / name)
    (root / "scripts/jobs/t.jobs").write_text(
        "# needs: data/in.txt\na | 1 | sleep 2; mkdir -p .persist/r/a && cp data/in.txt .persist/r/a/seen.txt\n"
    )
    env = dict(os.environ, GPU_QUEUE_GPUS="1", REPRO_GIT_COMMIT="abc", JOBS="scripts/jobs/t.jobs", WAIT="0")
    env["OUT"] = str(tmp_path / "out")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # python3 of this interpreter
    run = dict(cwd=root, env=env, capture_output=True, text=True, timeout=120)
    cmd = ["bash", "scripts/gpu_campaign.sh", "start"]
    missing = subprocess.run(cmd, **run)
    assert missing.returncode == 2 and "needs data/in.txt" in missing.stderr
    assert not (root / ".persist/tree").exists()
    (root / "data").mkdir()
    (root / "data/in.txt").write_text("first")
    subprocess.run(cmd, **run)  # returns at once (WAIT=0), the job still sleeping
    (root / "data/in.txt").write_text("replaced")  # as a later call's fresh copy of the tree would
    later = subprocess.run(["bash", "scripts/gpu_campaign.sh"], **{**run, "env": {**env, "WAIT": "60"}})
    assert later.returncode == 0, later.stderr
    assert (root / ".persist/tree/.persist/r/a/seen.txt").read_text() == "first"
    with tarfile.open(tmp_path / "out" / "campaign.tar.gz") as tar:
        assert ".persist/r/a/seen.txt" in tar.getnames()


def test_bad_inbox_files_are_rejected_and_the_queue_goes_on(tmp_path):
    """A malformed inbox file killed the daemon (jobs left 'running' for ever); an inbox file with a
    name twice, or a name already queued, corrupted the status and lost a log. Both are rejected
    now, named on the queue's log, and every queued job still ends."""
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("long | 1 | sleep 3\nnext | 1 | echo next\n")
    env = dict(os.environ, GPU_QUEUE_GPUS="1")
    run = dict(cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    inbox = tmp_path / ".persist/queue/inbox"
    inbox.mkdir(parents=True)
    (inbox / "a-typo.jobs").write_text("no separators here\n")
    (inbox / "b-dup.jobs").write_text("x | 1 | echo one\nx | 1 | echo two\n")
    (inbox / "c-clash.jobs").write_text("long | 1 | echo again\n")
    (inbox / "d-good.jobs").write_text("late | 1 | echo late\n")
    assert subprocess.run([sys.executable, str(SCRIPT), "start", str(jobs)], **run).returncode == 0
    assert subprocess.run([sys.executable, str(SCRIPT), "wait", "40"], **run).returncode == 0
    status = {j["name"]: j for j in json.loads((tmp_path / ".persist/queue/status.json").read_text())}
    assert {n: j.get("rc") for n, j in status.items()} == {"long": 0, "next": 0, "late": 0}
    log = (tmp_path / ".persist/queue/queue.log").read_text()
    assert "rejected" in log and "a-typo.jobs" in log and "repeated: ['x']" in log and "already queued: ['long']" in log


def test_a_wait_that_runs_out_says_how_long_each_running_job_ran_and_was_quiet(tmp_path):
    """The wait's last lines give each running job's time so far and its log's quiet time: a call
    that returns mid-job tells a job near its end from a stuck one."""
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("slow | 1 | echo begun; sleep 6\n")
    env = dict(os.environ, GPU_QUEUE_GPUS="1")
    run = dict(cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    try:
        assert subprocess.run([sys.executable, str(SCRIPT), "start", str(jobs)], **run).returncode == 0
        status_file = tmp_path / ".persist/queue/status.json"
        for _ in range(200):  # the detached queue starts the job (a loaded CI machine may take a while)
            if status_file.exists() and "running" in status_file.read_text():
                break
            time.sleep(0.1)
        waited = subprocess.run([sys.executable, str(SCRIPT), "wait", "1"], **run)
        assert waited.returncode == 1
        last = waited.stdout.strip().splitlines()[-1]
        assert "still running: slow for " in last and "its log quiet for " in last, waited.stdout
        assert json.loads(status_file.read_text())[0]["started_at"] > 0
    finally:  # let the queue end, so that no process outlives the test
        subprocess.run([sys.executable, str(SCRIPT), "wait", "20"], **run)
