"""Command line: ``python -m repro list | run SUITE | compare SUITE | plot SUITE | dashboard``."""

from __future__ import annotations

import argparse
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

    for name in SUITES:
        mod = get_suite(name)
        print(f"{name:10s} {mod.PAPER:8s} {mod.TITLE}")
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


def cmd_run(args: argparse.Namespace) -> int:
    _configure_backend(args.suite)
    from repro.results import ResultSet, read_results
    from repro.roofline import measure_ceilings
    from repro.suite import RunContext, figures_dir, pick_profile
    from suites import get_suite

    mod = get_suite(args.suite)
    device = _parse_device(args.device)
    profile = pick_profile(args.profile, device)
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
    print(f"== {args.suite}: {mod.TITLE} | device={results.prov['device']} profile={profile}", flush=True)
    ceilings = measure_ceilings(device)
    print(
        f"   measured ceilings: copy {ceilings.copy_gbps:.0f} GB/s, {ceilings.gemm_dtype} GEMM "
        f"{ceilings.gemm_tflops:.1f} TFLOP/s",
        flush=True,
    )
    ctx = RunContext(args.suite, mod.ARTIFACT, device, profile, ceilings, results)
    mod.run(ctx)
    ctx.add_ceiling_rows()
    path = results.write()
    print(f"   wrote {len(results.rows)} rows to {path}")
    df = results.frame()
    if not args.no_figure:
        for p in mod.plot(df, fig_root / args.suite):
            print(f"   wrote {p}")
    _print_compare(mod, df)
    return 0


def _print_compare(mod, df) -> None:
    """Paper vs ours of one device and profile, with whether the rows are older than their code;
    a smoke run says it is no performance claim and lists the paper's values apart, as not
    comparable (its shapes are not the paper's)."""
    import pandas as pd

    from repro.paper import load_paper
    from repro.staleness import frame_staleness

    table = mod.compare(df)
    device, profile = df["device"].iloc[0], df["profile"].iloc[0]
    fmt = {"index": False, "float_format": lambda v: f"{v:.3g}", "na_rep": ""}
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 200):
        print(f"\n-- paper vs ours: {mod.TITLE} (device={device}, profile={profile})")
        for st in frame_staleness(mod.NAME, df):
            print(f"   {st.sentence()}")
        if profile != "full" or device == "cpu":
            print(f"   {profile} profile on {device}: tiny shapes, not a performance claim")
        print(table.to_string(**fmt) if not table.empty else "   (no comparable rows)")
        if profile != "full" or device == "cpu":
            paper = load_paper(mod.ARTIFACT, mod.PAPER)
            if not paper.empty:
                print(f"   paper values, not comparable ({profile}):")
                print(paper.to_string(**fmt))


def cmd_compare(args: argparse.Namespace) -> int:
    from repro.results import load_suite_results
    from suites import get_suite

    mod = get_suite(args.suite)
    df = load_suite_results(args.suite, Path(args.results_dir) if args.results_dir else None)
    if df.empty:
        print(f"no results for {args.suite} yet; run: python -m repro run {args.suite}", file=sys.stderr)
        return 1
    if args.device:
        df = df[df["device"] == args.device]
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="repro", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the suites").set_defaults(fn=cmd_list)
    r = sub.add_parser("run", help="run one suite: check correctness, time, write results and figures")
    r.add_argument("suite")
    r.add_argument(
        "--profile",
        choices=["auto", "smoke", "full"],
        default="auto",
        help="auto: full on a CUDA GPU, smoke (tiny shapes, CPU timer) elsewhere",
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ValueError as exc:  # bad input (a device, a folder, a results file): one line, no traceback
        from repro.results import InputError

        if not isinstance(exc, InputError):
            raise
        msg = " ".join(str(exc).split())
        print(f"repro {args.cmd}: error: {msg}", file=sys.stderr)
        return 2
