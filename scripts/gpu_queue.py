"""A job queue over the GPUs of one lent machine (device tool), for campaigns longer than a call.

A call of the device tool lasts at most 10 minutes, but a held machine stays (up to 30) when the
next call follows within its idle window, and a process started in its own session outlives the
call. So a campaign is: one call starts this queue detached and waits; later calls only wait and
bring back what has finished. Each job gets whole GPUs (``CUDA_VISIBLE_DEVICES``), in the order of
the job file, strictly first-in first-out (a job that needs 4 GPUs is not starved by later small
ones); its output goes to ``.persist/queue/logs/<name>.log``. A job that needs more GPUs than the
machine has is skipped (state ``skipped``, with the reason), so one job file serves a 2- and a
4-GPU machine.

Job file: one job per line, ``name | gpus | shell command``; ``#`` starts a comment. More job files
dropped into ``.persist/queue/inbox/`` later are appended in name order.

    python3 scripts/gpu_queue.py start JOBFILE      # detached; returns at once
    python3 scripts/gpu_queue.py wait SECONDS       # until every job has ended or SECONDS passed
    python3 scripts/gpu_queue.py pack OUT.tar.gz PATH...   # status, logs and PATHs (if present)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(".persist/queue")
STATUS = ROOT / "status.json"


class JobFileError(ValueError):
    """A job file that cannot be queued (a malformed line, a name twice)."""


def parse(path: Path) -> list[dict]:
    """Jobs of a job file, checked: unique names, a positive GPU count, a command."""
    jobs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|", 2)]
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or int(parts[1]) < 1 or not parts[2]:
            raise JobFileError(f"{path}:{n}: expected 'name | gpus | command', got {line!r}")
        jobs.append({"name": parts[0], "gpus": int(parts[1]), "cmd": parts[2], "state": "pending"})
    names = [j["name"] for j in jobs]
    dups = sorted({x for x in names if names.count(x) > 1})
    if dups:  # one name, one log and one status entry: a second job of that name would take over both
        raise JobFileError(f"{path}: job names must be unique, repeated: {dups}")
    return jobs


def _inbox_jobs(path: Path, names: set[str]) -> list[dict]:
    """The jobs of an inbox file, or none (the file rejected, with the reason on the queue's log):
    a bad file dropped in later must neither stop the queue nor take over a queued job's name."""
    try:
        new = parse(path)
    except (JobFileError, OSError, UnicodeDecodeError) as exc:
        print(f"{time.strftime('%H:%M:%S')} rejected {path}: {exc}", flush=True)
        return []
    clash = sorted(j["name"] for j in new if j["name"] in names)
    if clash:
        print(f"{time.strftime('%H:%M:%S')} rejected {path}: job names already queued: {clash}", flush=True)
        return []
    return new


def _gpu_count() -> int:
    if os.environ.get("GPU_QUEUE_GPUS"):  # tests: pretend to have this many
        return int(os.environ["GPU_QUEUE_GPUS"])
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _save(jobs: list[dict]) -> None:
    tmp = STATUS.with_suffix(".tmp")
    tmp.write_text(json.dumps(jobs, indent=1) + "\n")
    os.replace(tmp, STATUS)


def serve(jobfile: Path) -> None:
    """Run the jobs to the end (the detached process)."""
    try:
        jobs, seen = parse(jobfile), set()
    except JobFileError as exc:
        raise SystemExit(str(exc)) from None
    names = {j["name"] for j in jobs}
    total = _gpu_count()
    free = list(range(total))
    running: dict[str, tuple[subprocess.Popen, list[int], float]] = {}
    (ROOT / "logs").mkdir(parents=True, exist_ok=True)
    while True:
        for extra in sorted((ROOT / "inbox").glob("*")) if (ROOT / "inbox").exists() else []:
            if extra.name not in seen:
                seen.add(extra.name)
                jobs += _inbox_jobs(extra, names)
                names |= {j["name"] for j in jobs}
        for name, (proc, gpus, t0) in list(running.items()):
            if proc.poll() is not None:
                job = next(j for j in jobs if j["name"] == name)
                job.update(state="done", rc=proc.returncode, seconds=round(time.time() - t0, 1))
                free += gpus
                del running[name]
        for job in jobs:
            if job["state"] == "pending" and job["gpus"] > total:
                # more GPUs than this machine has: it could never start, and first-in first-out
                # would hold every later job behind it for the whole lease
                job.update(state="skipped", reason=f"needs {job['gpus']} GPUs, the machine has {total}")
        for job in jobs:
            if job["state"] != "pending":
                continue
            if job["gpus"] > len(free):
                break  # first in, first out: nothing overtakes a job waiting for GPUs
            gpus, free = sorted(free)[: job["gpus"]], sorted(free)[job["gpus"] :]
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)))
            log = open(ROOT / "logs" / f"{job['name']}.log", "w")  # noqa: SIM115 (the child owns it)
            log.write(f"$ {job['cmd']}\n# GPUs {gpus}, started {time.strftime('%H:%M:%S')}\n")
            log.flush()
            proc = subprocess.Popen(["bash", "-c", job["cmd"]], stdout=log, stderr=subprocess.STDOUT, env=env)
            running[job["name"]] = (proc, gpus, time.time())
            job.update(state="running", gpus_used=gpus, started=time.strftime("%H:%M:%S"), started_at=time.time())
        _save(jobs)
        if not running and all(j["state"] != "pending" for j in jobs):
            return
        time.sleep(2)


def wait(seconds: float) -> int:
    """Print progress until every job has ended or ``seconds`` passed; 0 once all have ended."""
    t_end, last = time.time() + seconds, ""
    while True:
        jobs = json.loads(STATUS.read_text()) if STATUS.exists() else []
        line = " ".join(f"{j['name']}:{j['state'][0]}{j.get('rc', '')}" for j in jobs)
        if line != last:
            print(time.strftime("%H:%M:%S"), line, flush=True)
            last = line
        if jobs and all(j["state"] in ("done", "skipped") for j in jobs):
            return 0
        if time.time() >= t_end:
            for line in running_report(jobs):
                print(time.strftime("%H:%M:%S"), line, flush=True)
            return 1
        time.sleep(5)


def running_report(jobs: list[dict]) -> list[str]:
    """A line for each running job: how long it has run and how long its log has been quiet, so the
    caller can tell a job near its end from one stuck (session 65 misread a job cut 8.5 min in as
    one silent for 12 min: the wait's last line was the job's start)."""
    now, lines = time.time(), []
    for job in (j for j in jobs if j["state"] == "running"):
        log = ROOT / "logs" / f"{job['name']}.log"  # serve writes it before it marks the job running
        ran, quiet = now - job["started_at"], now - log.stat().st_mtime
        lines.append(f"still running: {job['name']} for {ran:.0f} s, its log quiet for {quiet:.0f} s")
    return lines


def pack(out: Path, paths: list[str]) -> None:
    with tarfile.open(out, "w:gz") as tar:
        for p in [str(ROOT / "status.json"), str(ROOT / "logs"), *paths]:
            if Path(p).exists():
                tar.add(p, filter=lambda ti: None if ti.name.endswith(".pt") else ti)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "start":
        ROOT.mkdir(parents=True, exist_ok=True)
        jobfile = ROOT / "jobs.txt"
        jobfile.write_text(Path(argv[1]).read_text())
        try:
            parse(jobfile)  # fail here, not in the detached process
        except JobFileError as exc:
            raise SystemExit(str(exc)) from None
        daemon = open(ROOT / "queue.log", "a")  # noqa: SIM115 (the detached process owns it)
        cmd = [sys.executable, __file__, "serve", str(jobfile)]
        subprocess.Popen(cmd, stdout=daemon, stderr=subprocess.STDOUT, start_new_session=True)
        return 0
    if len(argv) == 2 and argv[0] == "serve":
        serve(Path(argv[1]))
        return 0
    if len(argv) == 2 and argv[0] == "wait":
        return wait(float(argv[1]))
    if len(argv) >= 2 and argv[0] == "pack":
        pack(Path(argv[1]), argv[2:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
