"""scripts/gpu_queue.py, the job queue of a lent multi-GPU machine: jobs get disjoint GPUs, run in
file order with nothing overtaking a job that waits for GPUs, and every job's exit code and log
are kept (a failed job never stops the others)."""

import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_bad_job_line_fails_before_anything_starts(tmp_path):
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("a | two | echo a\n")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "start", str(jobs)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and "expected 'name | gpus | command'" in proc.stderr
