"""The kernel-regression gate: per-benchmark thresholds derived from measured run-to-run noise.

A *run* is one pytest-benchmark JSON of ``tests/benchmarks`` on a GPU (``--benchmark-json`` or a
``--benchmark-save``d run): its ``stats`` are device seconds per call (tests/benchmarks/__init__.py,
:class:`repro.timing.DeviceClock`), never host launch or synchronise latency.

- :func:`make_baseline` takes k >= 2 runs of one commit on one GPU (separate processes, and
  separate machine starts where available: runs are just files, merge them), and stores per
  benchmark the median of the runs' medians (the baseline), each run's median, the run-to-run
  spread (largest relative deviation of one run from the baseline) and the threshold
  ``max(mult x spread, floor)`` (default 3 x spread, at least 3%); a benchmark also fails only
  when it is at least ``ABS_FLOOR_US`` slower per call.
- :func:`compare` checks a new run against it: a benchmark fails when its median device time is
  more than its threshold above the baseline. The report names the benchmark, baseline and now,
  the change, the threshold and the noise it came from.

Command line: ``python -m repro bench save | compare | check | gate-check`` (repro/cli.py).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GATE_VERSION = 1
MULT = 3.0
FLOOR = 0.03
ABS_FLOOR_US = 0.5
"""A benchmark fails only when it is also at least this many microseconds per call slower: between
separate processes on one machine, kernels under 15 us moved by 0.3-0.4 us (+3-4%) with no code
change (campaign 4c9f848, H100: transposable exhaustive 1024x1600 7.9 -> 8.2 us, mvue 3072x768
12.4 -> 12.8 us), more than the spread of three runs in one process predicts. The gate therefore
cannot see a regression smaller than 0.5 us per call (6% of an 8 us kernel)."""
HOST_SYNCED_FLOOR = 0.5
"""An uncaptured (host-synced) benchmark fails only past this much slower (``host_synced``): host
load moved such benchmarks by up to +35% with no code change; a gross regression still fails."""


class GateError(ValueError):
    """Runs or a baseline that cannot be used (wrong file, another GPU, too few runs)."""


def load_run(path: str | Path) -> dict:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GateError(f"{p}: not a readable pytest-benchmark JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise GateError(f"{p}: not a pytest-benchmark run (no 'benchmarks' list)")
    data.setdefault("_source", str(p))
    return data


def run_files(paths: list[str | Path]) -> list[Path]:
    """JSON files named, or found (sorted) in folders named."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*.json") if q.is_file()))
        elif p.is_file():
            out.append(p)
        else:
            raise GateError(f"{p}: no such run file or folder")
    seen: set[Path] = set()
    unique = []
    for q in out:  # a file named twice (itself and its folder) is one run, not two
        if q.resolve() not in seen:
            seen.add(q.resolve())
            unique.append(q)
    return unique


def medians(run: dict) -> dict[str, float]:
    """fullname -> median device milliseconds per call, for every benchmark with stats; a GateError
    naming the file for a benchmark without a name or with a median that is not a number."""
    out = {}
    src = run.get("_source", "run")
    for i, b in enumerate(run["benchmarks"]):
        name = b.get("fullname") if isinstance(b, dict) else None
        if not isinstance(name, str) or not name:
            raise GateError(f"{src}: benchmark {i} has no text 'fullname'")
        st = b.get("stats") or {}
        if isinstance(st, dict) and st.get("median") is not None:
            med = st["median"]
            if isinstance(med, bool) or not isinstance(med, (int, float)):
                raise GateError(f"{src}: {name}: median {med!r} is not a number")
            out[name] = float(med) * 1e3
    return out


def timers(run: dict) -> dict[str, str]:
    """fullname -> how the benchmark was timed (``extra_info.timer``; "" where not said)."""
    return {str(b.get("fullname", "")): str((b.get("extra_info") or {}).get("timer", "")) for b in run["benchmarks"]}


def _uncaptured(timer: str) -> bool:
    return timer.startswith("device-clock/") and "graph" not in timer


def host_synced(run: dict) -> set[str]:
    """Benchmarks of ``run`` timed uncaptured (their call syncs with the host, so it cannot be a
    CUDA graph): their events span the host's work between kernels too, so host load moves them.
    On a second H100 machine start, with other jobs on the host, three of the four moved by
    6-35% with no code change (results/benchmarks/<gpu>/second-start-aa132e4): the gate reports
    them and fails only past ``HOST_SYNCED_FLOOR``; their kernels are gated through captured twins."""
    return {name for name, timer in timers(run).items() if _uncaptured(timer)}


def _gpu(run: dict) -> str:
    return str((run.get("machine_info") or {}).get("gpu", "?"))


def _commit(run: dict) -> str:
    return str((run.get("commit_info") or {}).get("id") or "?")


def check_device_time(run: dict) -> None:
    """Refuse runs whose stats are not device time (saved before the DeviceClock, or on a CPU)."""
    bad = {t.split("/")[0] for t in timers(run).values()} - {"device-clock"}
    if bad:
        raise GateError(
            f"{run.get('_source', 'run')}: stats not timed by repro.timing.DeviceClock (timer {sorted(bad)}): "
            "the gate compares device time only; re-run `python -m repro bench save` on the GPU"
        )


def _finite_at_least(v: object, lo: float) -> bool:
    """A real number (bools refused), finite and >= ``lo``: a gate parameter or a stored threshold."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= lo


def _valid_ms(v: float) -> bool:
    """A median device time the gate can compare: finite and positive."""
    return math.isfinite(v) and v > 0


def make_baseline(runs: list[dict], mult: float = MULT, floor: float = FLOOR, require_device_time: bool = True) -> dict:
    """The gate's baseline from ``runs`` (k >= 2, one GPU): per benchmark baseline, noise, threshold."""
    for what, v in (("mult", mult), ("floor", floor)):
        if not _finite_at_least(v, 0.0):
            raise GateError(f"{what} must be a finite number >= 0, got {v!r}")
    if mult == 0:
        raise GateError("mult must be > 0: thresholds scale the run-to-run spread")
    if len(runs) < 2:
        raise GateError(f"{len(runs)} run(s): thresholds come from run-to-run noise, give at least 2 (3+ better)")
    gpus = {_gpu(r) for r in runs}
    if len(gpus) != 1:
        raise GateError(f"runs from different GPUs {sorted(gpus)}: a baseline is per GPU")
    if require_device_time:
        for r in runs:
            check_device_time(r)
    per_run = [medians(r) for r in runs]
    ids = [
        (_commit(r), str(r.get("datetime", "")), json.dumps(m, sort_keys=True))
        for r, m in zip(runs, per_run, strict=True)
    ]
    dups = sorted({r.get("_source", "?") for r, i in zip(runs, ids, strict=True) if ids.count(i) > 1})
    if dups:  # a copy counted twice shrinks the spread and inflates k
        raise GateError(f"the same run given more than once (same commit, time and medians): {dups}")
    per_timer = [timers(r) for r in runs]
    names = sorted(set().union(*per_run))
    benches: dict[str, dict] = {}
    partial = []
    for name in names:
        vals = [m[name] for m in per_run if name in m]
        if len(vals) < len(runs):
            partial.append(name)
            continue
        if not all(map(_valid_ms, vals)):  # a zero baseline: an infinite threshold
            raise GateError(f"{name}: median device times {vals} ms are not all finite and positive")
        base = statistics.median(vals)
        spread = max(abs(v / base - 1.0) for v in vals)
        how = {t[name] for t in per_timer}
        if len(how) != 1:
            raise GateError(f"{name}: timed differently across the runs ({sorted(how)}): not one baseline")
        benches[name] = {
            "baseline_ms": base,
            "runs_ms": vals,
            "spread": spread,
            "threshold": max(mult * spread, floor),
            "timer": how.pop(),  # a run timed otherwise measures something else (compare: invalid)
        }
    return {
        "version": GATE_VERSION,
        "what": "median device ms per call (repro.timing.DeviceClock); fail when now > baseline x (1 + threshold)",
        "rule": {
            "mult": mult,
            "floor": floor,
            "abs_floor_us": ABS_FLOOR_US,
            "spread": "max over runs of |run median / baseline - 1|",
        },
        "gpu": gpus.pop(),
        "machine_info": runs[0].get("machine_info", {}),
        "commits": sorted({_commit(r) for r in runs}),
        "runs": [
            {"source": r.get("_source", ""), "datetime": r.get("datetime", ""), "commit": _commit(r)} for r in runs
        ],
        "k": len(runs),
        "benchmarks": benches,
        "partial": partial,  # present in only some runs: not gated
    }


def load_baseline(path: str | Path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "gate.json"
    try:
        gate = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GateError(f"{p}: no readable gate baseline ({e}); make one with `python -m repro bench save`") from None
    if not isinstance(gate, dict) or gate.get("version") != GATE_VERSION or "benchmarks" not in gate:
        raise GateError(f"{p}: not a gate baseline of version {GATE_VERSION}")
    return gate


@dataclass
class Row:
    name: str
    baseline_ms: float
    now_ms: float
    threshold: float
    spread: float
    runs_ms: list[float]
    host_synced: bool = False  # gated only past HOST_SYNCED_FLOOR (``host_synced``)
    abs_floor_us: float = ABS_FLOOR_US

    @property
    def change(self) -> float:
        return self.now_ms / self.baseline_ms - 1.0

    @property
    def slower(self) -> bool:
        return self.change > self.threshold

    @property
    def abs_floor(self) -> float:
        """``abs_floor_us`` as a relative change of this benchmark's baseline."""
        return self.abs_floor_us / (self.baseline_ms * 1e3) if self.baseline_ms > 0 else 0.0

    @property
    def limit(self) -> float:
        """The change past which this benchmark fails."""
        return max(self.threshold, self.abs_floor, HOST_SYNCED_FLOOR if self.host_synced else 0.0)

    @property
    def why_limit(self) -> str:
        """What set ``limit`` when it is not the noise threshold."""
        if self.limit <= self.threshold:
            return ""
        if self.host_synced and self.limit == HOST_SYNCED_FLOOR:
            return " (host-synced floor)"
        return f" ({self.abs_floor_us:g} us floor)"

    @property
    def failed(self) -> bool:
        return self.change > self.limit


@dataclass
class Report:
    gpu: str
    k: int
    rule: dict
    rows: list[Row] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # in the baseline, not in this run
    new: list[str] = field(default_factory=list)  # in this run, not in the baseline
    invalid: list[str] = field(default_factory=list)  # a non-finite or non-positive time or threshold
    retimed: list[str] = field(default_factory=list)  # timed otherwise than the baseline (captured -> uncaptured)
    allow_missing: bool = False  # a chosen subset (-k): benchmarks left out do not fail the gate

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if r.failed]

    @property
    def problems(self) -> list[str]:
        """What fails the gate besides slower benchmarks: nothing compared, an invalid time, a
        benchmark of the baseline missing (unless a subset was chosen): a gate that compared
        nothing, or not the benchmark that regressed, has not passed."""
        return [
            *(["no benchmark compared"] if not self.rows else []),
            *([f"{len(self.invalid)} with an invalid time or threshold"] if self.invalid else []),
            *([f"{len(self.retimed)} timed otherwise than the baseline"] if self.retimed else []),
            *([f"{len(self.missing)} of the baseline missing"] if self.missing and not self.allow_missing else []),
        ]

    @property
    def passed(self) -> bool:
        return not self.failures and not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "k": self.k,
            "rule": self.rule,
            "passed": self.passed,
            "failures": [r.name for r in self.failures],
            "rows": [{**r.__dict__, "change": r.change, "failed": r.failed} for r in self.rows],
            "host_synced_slower": [r.name for r in self.rows if r.host_synced and r.slower and not r.failed],
            "missing": self.missing,
            "invalid": self.invalid,
            "retimed": self.retimed,
            "allow_missing": self.allow_missing,
            "new": self.new,
        }


def compare(gate: dict, run: dict, require_device_time: bool = True, allow_missing: bool = False) -> Report:
    """This run against the baseline; ``allow_missing``: the run is a chosen subset (``-k``)."""
    if _gpu(run) != gate["gpu"]:
        raise GateError(
            f"refusing to compare benchmarks across GPUs: the baseline was recorded on gpu={gate['gpu']!r}, "
            f"this run on gpu={_gpu(run)!r}. Baselines are per GPU (results/benchmarks/<gpu-slug>/gate)."
        )
    if require_device_time:
        check_device_time(run)
    now, synced, timing = medians(run), host_synced(run), timers(run)
    rep = Report(gate["gpu"], int(gate.get("k", 0)), dict(gate.get("rule", {})), allow_missing=allow_missing)
    # baselines saved before the absolute floor existed get today's floor
    abs_us = float(rep.rule.setdefault("abs_floor_us", ABS_FLOOR_US))
    for name, b in sorted(gate["benchmarks"].items()):
        if name not in now:
            rep.missing.append(name)
            continue
        if not (_valid_ms(now[name]) and _valid_ms(b["baseline_ms"])):  # NaN > limit is False
            rep.invalid.append(name)
            continue
        th = b.get("threshold")
        if not _finite_at_least(th, 0.0):
            rep.invalid.append(name)  # a NaN threshold passed everything; a negative one failed on noise
            continue
        was = b.get("timer")  # baselines saved before timers were recorded: not checked
        if was is not None and was != timing[name]:
            rep.retimed.append(f"{name}: baseline timed {was!r}, this run {timing[name]!r}")
            continue
        synced_both = name in synced and (was is None or _uncaptured(was))  # the floor for uncaptured baselines only
        row = Row(name, b["baseline_ms"], now[name], th, b["spread"], list(b["runs_ms"]), synced_both, abs_us)
        rep.rows.append(row)
    rep.new = sorted(set(now) - set(gate["benchmarks"]))
    return rep


def _us(ms: float) -> str:
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.3f} ms"


def format_report(rep: Report) -> str:
    rule = rep.rule
    mult, floor = rule.get("mult", MULT), rule.get("floor", FLOOR)
    abs_us = rule.get("abs_floor_us", ABS_FLOOR_US)
    lines = [
        f"kernel regression gate: {len(rep.rows)} benchmarks compared on {rep.gpu}, device time per call "
        f"(median), baseline = median of {rep.k} runs, threshold = max({mult:g} x run-to-run spread, {floor:.0%}, "
        f"{abs_us:g} us)"
    ]
    for r in rep.failures:
        lines.append(
            f"FAIL {r.name}: baseline {_us(r.baseline_ms)}, now {_us(r.now_ms)} ({r.change:+.1%}) "
            f"> threshold +{r.limit:.1%}{r.why_limit} "
            f"(noise: spread {r.spread:.1%} over {len(r.runs_ms)} runs "
            f"{', '.join(_us(v) for v in r.runs_ms)})"
        )
    for r in rep.rows:
        if r.host_synced and r.slower and not r.failed:
            lines.append(
                f"INFO {r.name}: baseline {_us(r.baseline_ms)}, now {_us(r.now_ms)} ({r.change:+.1%}) > threshold "
                f"+{r.threshold:.1%}, but timed uncaptured (it syncs with the host, so host load moves it): "
                f"fails only past +{HOST_SYNCED_FLOOR:.0%}"
            )
    for name in rep.invalid:
        lines.append(f"INVALID {name}: a non-finite or non-positive median device time or threshold (fails the gate)")
    for what in rep.retimed:
        lines.append(f"RETIMED {what} (fails the gate: it measures something else, say a new host sync)")
    for name in rep.missing:
        how = "a subset was chosen: not gated" if rep.allow_missing else "fails the gate; skipped or failed?"
        lines.append(f"MISSING {name}: in the baseline, not in this run ({how})")
    for name in rep.new:
        lines.append(f"NEW {name}: not in the baseline (not gated)")
    worst = max((r for r in rep.rows if not r.host_synced), key=lambda r: r.change - r.limit, default=None)
    if rep.failures:
        lines.append(f"FAILED: {len(rep.failures)} of {len(rep.rows)} benchmarks slower than their threshold")
    elif rep.problems:
        lines.append(f"FAILED: {'; '.join(rep.problems)}")
    else:
        closest = f"; closest: {worst.name} {worst.change:+.1%} vs threshold +{worst.limit:.1%}" if worst else ""
        lines.append(f"PASSED: no benchmark slower than its threshold{closest}")
    return "\n".join(lines)


def expectation(rep: Report, pattern: str) -> tuple[bool, str]:
    """Whether the failures are exactly the compared benchmarks matching ``pattern`` (a regex,
    searched in the full name), with a line saying what differs: the A/B check."""
    rx = re.compile(pattern)
    if rep.problems:  # a planted benchmark missing or invalid has not shown that the gate catches it
        return False, f"the run itself fails the gate: {'; '.join(rep.problems)}"
    expected = {r.name for r in rep.rows if rx.search(r.name)}
    failed = {r.name for r in rep.failures}
    if not expected:
        return False, f"no compared benchmark matches {pattern!r}"
    if failed == expected:
        return True, f"failures are exactly the {len(expected)} benchmarks matching {pattern!r}"
    parts = []
    if expected - failed:
        parts.append(f"expected but passed: {sorted(expected - failed)}")
    if failed - expected:
        parts.append(f"failed but not expected: {sorted(failed - expected)}")
    return False, "; ".join(parts)


# --------------------------------------------------------------------------------------------
# Running the benchmark suite (GPU) and the commands of `python -m repro bench`
# --------------------------------------------------------------------------------------------

PLANTS = {"geglu": r"test_geglu\[ours-"}
"""REPRO_PLANT_SLOWDOWN values (kernels/geglu.py) and the benchmarks each must fail: the A/B check."""


def gpu_slug() -> str:
    import torch

    from repro.provenance import device_slug

    if not torch.cuda.is_available():
        raise GateError(
            "no CUDA GPU here: benchmark runs and baselines are per GPU (results/benchmarks/<gpu-slug>/gate); "
            "on a CPU `pytest tests/benchmarks` only checks that the benchmarks run"
        )
    return device_slug(torch.device("cuda"))


def run_suite(json_out: Path, log: Path, select: str | None = None, env: dict[str, str] | None = None) -> dict:
    """One run of ``pytest tests/benchmarks`` in a fresh process (compiled Triton kernels), its
    pytest-benchmark JSON written to ``json_out`` and its output to ``log``; raises
    :class:`GateError` if a benchmark failed (a correctness check) or nothing was timed."""
    import os
    import subprocess
    import sys
    import time

    from repro.provenance import REPO

    json_out.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", "tests/benchmarks", "-q", "-p", "no:cacheprovider"]
    cmd += [f"--benchmark-json={json_out.resolve()}", "--benchmark-columns=median,iqr,rounds,iterations"]
    if select:
        cmd += ["-k", select]
    full_env = {**os.environ, "TRITON_INTERPRET": "0", **(env or {})}
    t0 = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(cmd)}  (env: {env or {}})\n")
        fh.flush()
        rc = subprocess.run(cmd, cwd=REPO, env=full_env, stdout=fh, stderr=subprocess.STDOUT).returncode
        fh.write(f"\nexit {rc}, {time.perf_counter() - t0:.1f} s wall\n")
    if rc != 0:
        raise GateError(f"benchmark run failed (exit {rc}): see {log}")
    if not json_out.is_file() or json_out.stat().st_size == 0:  # pytest-benchmark writes none when disabled
        raise GateError(f"{json_out}: no benchmark was timed (no CUDA GPU, or all skipped?): see {log}")
    run = load_run(json_out)
    if not medians(run):
        raise GateError(f"{json_out}: no benchmark was timed (all skipped?): see {log}")
    return run


def save(
    out_dir: Path,
    k: int,
    extra: list[Path],
    select: str | None,
    mult: float,
    floor: float,
    budget_s: float | None = None,
    reserve_runs: int = 0,
) -> dict:
    """k fresh runs into ``out_dir/runs`` (plus ``extra`` run files, e.g. from another machine
    start), then ``out_dir/gate.json`` from all of them. ``budget_s``: stop after 2 or more runs
    where one more run (and ``reserve_runs`` runs the caller still has to make, each taking as
    long as the last) would not fit in it; the number made is the baseline's ``k``."""
    import time

    from repro.provenance import git_commit

    runs = [load_run(p) for p in extra]
    commit = git_commit()[:12]
    t0 = time.perf_counter()
    for i in range(k):
        t_run = time.perf_counter()
        stem = f"{commit}-{_stamp()}-{i}"
        runs.append(run_suite(out_dir / "runs" / f"{stem}.json", out_dir / "logs" / f"{stem}.log", select))
        last = time.perf_counter() - t_run
        print(f"bench save: run {i + 1}/{k} done in {last:.0f} s", flush=True)
        spent = time.perf_counter() - t0
        if budget_s is not None and i + 1 >= 2 and i + 1 < k and spent + (1 + reserve_runs) * last > budget_s:
            print(f"bench save: stopping at {i + 1} runs to stay within {budget_s:.0f} s", flush=True)
            break
    gate = make_baseline(runs, mult, floor)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gate.json").write_text(json.dumps(gate, indent=1) + "\n", encoding="utf-8")
    return gate


def _stamp() -> str:
    import time

    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def write_report(rep: Report, stem: Path, expect: str | None = None) -> tuple[bool, str]:
    """``stem.txt`` and ``stem.json``; returns (ok, text): ok = passed, or with ``expect`` the
    failures are exactly the benchmarks matching it."""
    text = format_report(rep)
    data = rep.as_dict()
    ok = rep.passed
    if expect is not None:
        ok, why = expectation(rep, expect)
        text += f"\nexpected failures {expect!r}: {'OK' if ok else 'NOT MET'}: {why}"
        data["expect_fail"] = {"pattern": expect, "ok": ok, "why": why}
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".txt").write_text(text + "\n", encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return ok, text


def gate_check(
    root: Path, k: int, select: str | None, plant: str, mult: float, floor: float, budget_s: float | None = None
) -> int:
    """The GPU acceptance check of the gate, one machine start: save a baseline (k runs), A/A (one
    more run of the same commit must pass), A/B (a run with REPRO_PLANT_SLOWDOWN=``plant`` must
    fail exactly the benchmarks of :data:`PLANTS`). Writes under
    ``root/results/benchmarks/<gpu-slug>/gate`` (the baseline) and ``.../gate-check`` (runs, logs,
    reports, summary.json). Exit 0 when both hold."""
    import time

    base = root / "results" / "benchmarks" / gpu_slug()
    gate_dir, check_dir = base / "gate", base / "gate-check"
    stamp = _stamp()
    summary: dict[str, Any] = {"k": k, "select": select, "plant": plant, "started": stamp, "wall_s": {}}

    def done(stage: str, t0: float) -> None:
        summary["wall_s"][stage] = round(time.perf_counter() - t0, 1)
        check_dir.mkdir(parents=True, exist_ok=True)
        (check_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        print(f"gate-check: {stage} done in {summary['wall_s'][stage]} s", flush=True)

    t0 = time.perf_counter()
    gate = save(gate_dir, k, [], select, mult, floor, budget_s, reserve_runs=2)
    summary["baseline"] = {
        "k": gate["k"],
        "benchmarks": len(gate["benchmarks"]),
        "thresholds": {n: b["threshold"] for n, b in gate["benchmarks"].items()},
    }
    done("baseline", t0)

    t0 = time.perf_counter()
    aa = run_suite(check_dir / f"aa-{stamp}.json", check_dir / f"aa-{stamp}.log", select)
    aa_ok, aa_text = write_report(compare(gate, aa), check_dir / f"aa-report-{stamp}")
    print(aa_text, flush=True)
    summary["aa"] = {"ok": aa_ok}
    done("aa", t0)

    t0 = time.perf_counter()
    env = {"REPRO_PLANT_SLOWDOWN": plant}
    ab = run_suite(check_dir / f"ab-{plant}-{stamp}.json", check_dir / f"ab-{plant}-{stamp}.log", select, env)
    ab_ok, ab_text = write_report(compare(gate, ab), check_dir / f"ab-report-{plant}-{stamp}", PLANTS[plant])
    print(ab_text, flush=True)
    summary["ab"] = {"ok": ab_ok, "expect_fail": PLANTS[plant]}
    done("ab", t0)
    summary["ok"] = aa_ok and ab_ok
    (check_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(f"gate-check: A/A {'passed' if aa_ok else 'FALSE ALARM'}, A/B {'as expected' if ab_ok else 'NOT MET'}")
    return 0 if summary["ok"] else 1
