"""Bring a GPU campaign's results home (``scripts/gpu_campaign.sh`` returns ``campaign.tar.gz``):
merge every suite's rows from all the job folders that hold them (``scripts/merge_results.py``:
table8 keeps the stored rows of the models a job did not run; a job stopped early contributes the
rows it finished, from its journal, marked "partial run", but for a shape it did not finish, which
keeps its stored rows whole; the journal is kept beside the logs), copy the finished training runs into
``results/<device>/runs``, the queue's status and the jobs' logs into
``results/<device>/campaign-<sha>/``, a gate job's folders into
``results/benchmarks/<device>/gate-<sha>/``, and redraw the merged suites' figures. It prints what
each job ended as (finished, failed, cut by the lease's end, never started), so the closing note
can say it.

    python3 scripts/campaign_merge.py CAMPAIGN.tar.gz SHA [--into results] [--figures figures] [--no-plot]

The steps done by hand in sessions 17-20, in one place, so that none is forgotten."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from repro.results import DEVICE_SLUG_RE, JOURNAL_SUFFIX  # noqa: E402
from scripts.merge_results import merge  # noqa: E402

KEEP_OTHER_SHAPES = frozenset({"table8", "fast_figure3_e2e"})
"""Suites run in parts by model (``REPRO_TABLE8_MODELS``, ``FAST_E2E_MODELS`` and world size): a
part replaces only its own models' rows."""
GATE_FILES = ("aa_vs_committed.json", "aa_vs_committed.log")
TEST_OUTPUTS = ("pytest.txt", "junit.xml")
"""A job's test output (the GPU tests job), kept beside the campaign's logs."""


def unpack(tarball: Path, into: Path) -> Path:
    """The tarball's ``.persist`` folder, unpacked under ``into`` (members outside it refused)."""
    with tarfile.open(tarball) as tar:
        for m in tar.getmembers():
            if m.name.startswith("/") or ".." in Path(m.name).parts or not (m.isfile() or m.isdir()):
                raise SystemExit(f"{tarball}: refusing member {m.name!r}")
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12: refuse links, devices, odd modes too
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
    return into / ".persist"


def suite_parts(results: Path) -> dict[str, list[Path]]:
    """Suite -> the job folders (``.persist/r/<job>``) holding its rows or its journal."""
    parts: dict[str, list[Path]] = {}
    for job in sorted(p for p in results.iterdir() if p.is_dir()):
        for slug in sorted(p for p in job.iterdir() if p.is_dir() and DEVICE_SLUG_RE.fullmatch(p.name)):
            names = {f.name.removesuffix(".csv") for f in slug.glob("*.csv")}
            names |= {f.name.split(".")[0] for f in slug.glob(f"*{JOURNAL_SUFFIX}")}
            for suite in sorted(names):
                parts.setdefault(suite, []).append(job)
    return parts


def copy_runs(results: Path, into: Path) -> list[str]:
    """Finished training runs (``summary.json`` status finished) of every job into ``into/<slug>/runs``,
    where absent or finished later (retrained: jobs start from a copy of the stored runs, so the
    same run may come back from several jobs, old and new); checkpoints (``*.pt``) stay behind."""
    newest: dict[tuple[str, str], tuple[str, Path]] = {}
    for summary in sorted(results.glob("*/*/runs/*/summary.json")):
        run, info = summary.parent, json.loads(summary.read_text())
        slug = run.parent.parent.name
        if DEVICE_SLUG_RE.fullmatch(slug) and info.get("status") == "finished":
            when = str(info.get("finished_at", ""))
            if when >= newest.get((slug, run.name), ("", run))[0]:
                newest[(slug, run.name)] = (when, run)
    copied = []
    for (slug, name), (when, run) in sorted(newest.items()):
        dest = into / slug / "runs" / name
        if (dest / "summary.json").exists():
            stored = str(json.loads((dest / "summary.json").read_text()).get("finished_at", ""))
            if when <= stored:
                continue
            shutil.rmtree(dest)
        shutil.copytree(run, dest, ignore=shutil.ignore_patterns("*.pt"))
        copied.append(f"{slug}/runs/{name}")
    return copied


def job_states(persist: Path) -> list[tuple[str, str]]:
    """(job, how it ended) from the queue's status."""
    status = persist / "queue" / "status.json"
    if not status.exists():
        return []
    words = {"pending": "never started", "running": "cut by the lease's end"}
    out = []
    for j in json.loads(status.read_text()):
        if j.get("state") == "done":
            out.append((j["name"], "finished" if j.get("rc") == 0 else f"failed (exit {j.get('rc')})"))
        elif j.get("state") == "skipped":
            out.append((j["name"], f"skipped ({j.get('reason', 'not run')})"))
        else:
            out.append((j["name"], words.get(j.get("state"), str(j.get("state")))))
    return out


def copy_logs(persist: Path, dest: Path) -> None:
    """The queue's logs and status, and each job's test output (``<job>-pytest.txt``, ``<job>-junit.xml``)."""
    dest.mkdir(parents=True, exist_ok=True)
    queue = persist / "queue"
    for f in [*sorted((queue / "logs").glob("*.log")), *(queue / n for n in ("status.json", "queue.log", "gpu.txt"))]:
        if f.exists():
            shutil.copy2(f, dest / f.name)
    for name in TEST_OUTPUTS:
        for f in sorted((persist / "r").glob(f"*/{name}")):
            shutil.copy2(f, dest / f"{f.parent.name}-{name}")


def gpu_slug_of(persist: Path) -> str | None:
    """The device folder named by the queue's ``gpu.txt`` (nvidia-smi's CSV: the first GPU's name), or None."""
    gpu_txt = persist / "queue" / "gpu.txt"
    lines = gpu_txt.read_text().splitlines() if gpu_txt.exists() else []
    if len(lines) < 2 or len(lines[1].split(",")) < 2:
        return None
    slug = re.sub(r"[^a-z0-9]+", "-", lines[1].split(",")[1].strip().lower()).strip("-")
    return slug if DEVICE_SLUG_RE.fullmatch(slug) else None


def copy_gate(persist: Path, sha: str, benchmarks: Path) -> list[str]:
    """Every job folder with ``results/benchmarks/<slug>/`` (the gate job) into ``gate-<sha>/``."""
    done = []
    found = sorted(persist.glob("r/*/results/benchmarks/*"))
    per_gpu = [b.name for b in found]
    for bench in found:
        job = bench.parents[2]
        # two gate jobs on one GPU kind each keep their own folder (one overwrote the other's files)
        dest = benchmarks / bench.name / (f"gate-{sha}" if per_gpu.count(bench.name) == 1 else f"gate-{sha}-{job.name}")
        dest.mkdir(parents=True, exist_ok=True)
        for sub in (p for p in bench.iterdir() if p.is_dir()):
            shutil.copytree(sub, dest / sub.name, dirs_exist_ok=True)
        # every report and log the job wrote beside its results (aa_vs_committed_<sha>.json, gate_check.log)
        for f in sorted(job.iterdir()):
            if f.is_file() and (f.name in GATE_FILES or f.suffix == ".log" or f.name.startswith("aa_vs_committed")):
                shutil.copy2(f, dest / f.name)
        log = persist / "queue" / "logs" / f"{job.name}.log"
        if log.exists():
            shutil.copy2(log, dest / "gate_job.log")
        done.append(str(dest))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tarball", type=Path)
    ap.add_argument("sha", help="the commit the campaign ran (REPRO_GIT_COMMIT), for the folder names")
    ap.add_argument("--into", type=Path, default=Path("results"))
    ap.add_argument("--no-plot", action="store_true", help="do not redraw the merged suites' figures")
    args = ap.parse_args(argv)
    args.sha = args.sha[:7]  # folder names: the short commit, as the rest of results/
    with tempfile.TemporaryDirectory(prefix="campaign_") as tmp:
        persist = unpack(args.tarball, Path(tmp))
        results = persist / "r"
        merged: dict[str, Path] = {}
        journals: list[Path] = []  # a cut job's journal, kept beside the logs (merge may withhold rows of it)
        if results.exists():
            for suite, parts in suite_parts(results).items():
                path = merge(suite, parts, args.into, keep_other_shapes=suite in KEEP_OTHER_SHAPES, partial=True)
                merged[suite] = path
                journals += [j for job in parts for j in sorted(job.glob(f"*/{suite}.*{JOURNAL_SUFFIX}"))]
                print(f"merged {suite} from {', '.join(p.name for p in parts)} -> {path}")
            for run in copy_runs(results, args.into):
                print(f"copied run {run}")
            for dest in copy_gate(persist, args.sha, args.into / "benchmarks"):
                print(f"gate folders -> {dest}")
        # the device folder: a merged suite's, else the GPU the queue saw (a campaign of tests or the
        # gate alone has no suite rows; its job folders hold results/, not a device folder)
        slugs = sorted({p.parent.name for p in merged.values()}) or [s for s in [gpu_slug_of(persist)] if s]
        if not slugs:
            print("no device folder known (no suite rows, no gpu.txt): logs not copied", file=sys.stderr)
        for slug in slugs[:1]:
            copy_logs(persist, args.into / slug / f"campaign-{args.sha}")
            for j in journals:  # <job>-<suite>.<profile>.partial
                shutil.copy2(j, args.into / slug / f"campaign-{args.sha}" / f"{j.parents[1].name}-{j.name}")
            print(f"logs -> {args.into / slug / f'campaign-{args.sha}'}")
        for job, state in job_states(persist):
            print(f"job {job}: {state}")
    if not args.no_plot:
        for suite, path in merged.items():
            cmd = [sys.executable, "-m", "repro", "plot", suite, "--device", path.parent.name]
            subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
