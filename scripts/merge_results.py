"""Merge a suite's rows from the results folders of separate runs (jobs of one campaign on several
GPUs, or parts of a suite split over machine starts, e.g. ``REPRO_TABLE8_MODELS``) into
``results/<device>/<suite>.csv``, replacing that device's rows of the same profile; then redraw
the suite's figures with ``python -m repro plot SUITE``.

    python3 scripts/merge_results.py SUITE RESULTS_ROOT [RESULTS_ROOT ...] [--into results]
    python3 scripts/merge_results.py SUITE RESULTS_ROOT/DEVICE/SUITE.PROFILE.partial --partial --into RESULTS_ROOT

Every part must hold rows of the same device and profile, and no two parts may share a row key
(method, variant, shape, dtype, metric): a duplicate would silently hide one measurement. The
device-ceiling rows every part measured are the exception: the first part's are kept.
``--keep-other-shapes``: a re-run of some shapes only (the others failed or did not finish) keeps
the stored rows of the other shapes, each with the commit it was measured at.
``--partial``: a part whose run stopped before its end (no ``<suite>.csv``) contributes the rows
it finished, from its journal ``<suite>.<profile>.partial`` (``repro.results.ResultSet.
start_journal``; a part may also name the journal file itself, as where it lies beside finished
results), each marked as such in its ``command``; use it with ``--keep-other-shapes``
so that the stored rows of what the run did not reach stay. Whenever a part is such a journal,
the stored rows whose key no part re-measured stay too (each with its own commit): a run cut
before its last row must not delete the older rows of what it never reached. And a unit of rows
measured together (:data:`UNIT`: a shape, by default) that the cut run did not finish keeps its
stored rows whole: the journal's rows of it are not merged, so no stored ratio sits beside a time
of another run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from repro.results import (  # noqa: E402
    JOURNAL_SUFFIX,
    InputError,
    check_device_slug,
    locked,
    read_journal,
    read_results,
    write_atomic,
)

KEY = ["method", "variant", "shape", "dtype", "metric"]
UNIT = {"hu_table5_glue": ["method", "variant", "shape"], "hu_table7_glue": ["method", "variant", "shape"]}
"""The rows one run measures together (a model's step times and the speedups between them, a
pattern's masks and their ratios to each baseline: ``shape``, by default; a GLUE sweep's tasks and
their mean: one method and variant). A run cut early replaces a stored unit only where it re-measured
every stored row of it: the rows of one unit come from one run, so no stored ratio sits beside a
time of another run (campaign dbcdbf1's table8 journal held 55 of GPT-2 124M's 200 rows)."""


def _part(root: Path, suite: str, partial: bool) -> pd.DataFrame:
    """A part's rows: its results file, or (``partial``) the journal of a run that stopped early
    (those rows carry ``_journal`` = True)."""
    if root.is_file():
        # a journal named itself: the one part of a folder that also holds the suite's finished
        # csv (a run stopped early in the folder of earlier finished runs, e.g. results/)
        if not (partial and root.name.startswith(f"{suite}.") and root.name.endswith(JOURNAL_SUFFIX)):
            raise SystemExit(f"{root}: a file part must be a journal {suite}.<profile>{JOURNAL_SUFFIX}, with --partial")
        return _journal_part(root)
    found = sorted(root.glob(f"*/{suite}.csv"))
    journals = sorted(root.glob(f"*/{suite}.*{JOURNAL_SUFFIX}")) if partial else []
    if len(found) == 1 and not journals:
        return read_results(found[0]).assign(_slug=found[0].parent.name, _journal=False)
    if not found and len(journals) == 1:
        return _journal_part(journals[0])
    hint = "" if partial else " (a run that stopped early: --partial takes its journal)"
    raise SystemExit(
        f"{root}: expected one */{suite}.csv{' or one journal' if partial else ''}, found "
        f"{[str(f) for f in found + journals]}{hint}"
    )


def _journal_part(journal: Path) -> pd.DataFrame:
    df = read_journal(journal)
    if df.empty:
        raise SystemExit(f"{journal}: the run stopped before it finished any row")
    print(f"{journal}: {len(df)} rows of a partial run")
    return df.assign(_slug=journal.parent.name, _journal=True)


def _withhold_unfinished_units(suite: str, new: pd.DataFrame, stored: pd.DataFrame) -> pd.DataFrame:
    """``new`` without the journal rows of each unit (:data:`UNIT`) whose stored rows the cut run did
    not all re-measure: that unit keeps its stored rows whole (the journal holds the cut run's; a
    campaign's is kept in its folder). A unit not stored yet takes the journal's rows, marked partial."""
    unit = UNIT.get(suite, ["shape"])
    stored = stored[stored["method"] != "ceiling"]
    ceiling = (new["method"] == "ceiling").to_numpy()
    journal = new["_journal"].to_numpy() & ~ceiling
    if not journal.any() or stored.empty:
        return new

    def key(df: pd.DataFrame, cols: list[str]) -> pd.Series:
        return df[cols].astype(str).agg("\x1f".join, axis=1)

    stored_unit, stored_key = key(stored, unit), key(stored, KEY)
    new_unit, new_key = key(new, unit), key(new, KEY)
    withhold = np.zeros(len(new), dtype=bool)
    for u in sorted(set(new_unit[journal])):
        have = set(stored_key[stored_unit == u])
        rows = journal & (new_unit == u).to_numpy()
        got = set(new_key[rows])
        if have and not have <= got:
            withhold |= rows
            what = ", ".join(f"{c}={v}" for c, v in zip(unit, u.split("\x1f"), strict=True))
            print(
                f"{suite}: kept the stored rows of {what}: the cut run re-measured {len(got & have)} of its "
                f"{len(have)} rows, so its {int(rows.sum())} rows of it are not merged (one unit's rows come "
                "from one run; the journal holds them)"
            )
    if not (journal & ~withhold).any():  # nothing of the cut run merged: its ceilings neither
        withhold |= new["_journal"].to_numpy() & ceiling
    return new[~withhold]


def merge(suite: str, parts: list[Path], into: Path, keep_other_shapes: bool = False, partial: bool = False) -> Path:
    frames = [_part(root, suite, partial) for root in parts]
    new = pd.concat(frames, ignore_index=True)
    for col in ("device", "profile"):
        if new[col].nunique() != 1:
            raise SystemExit(f"parts differ in {col}: {sorted(new[col].unique())}")
    # the rows say which device measured them: they go to its folder, whatever folder a part lay in
    # (a journal copied to ~/Downloads once went to results/Downloads/)
    slug = str(new["device"].iloc[0])
    try:
        check_device_slug(slug, "the parts' rows")
    except InputError as exc:
        raise SystemExit(str(exc)) from None
    for folder in sorted(set(new["_slug"]) - {slug}):
        print(f"note: a part lay in folder {folder!r}; its rows were measured on {slug!r} and go there")
    # every part measured the device ceilings (copy bandwidth, GEMM rate): the first part's stand
    ceiling = new["method"] == "ceiling"
    new = new[~(ceiling & new.duplicated(KEY, keep="first"))]
    dup = new[new.duplicated(KEY, keep=False)]
    if len(dup):
        raise SystemExit(f"{len(dup)} rows share a key across parts, e.g.\n{dup[KEY].head().to_string()}")
    profile = new["profile"].iloc[0]
    from_journal = bool(new["_journal"].any())
    path = into / slug / f"{suite}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        old = read_results(path) if path.exists() else None
        if old is not None and from_journal:
            new = _withhold_unfinished_units(suite, new, old[old["profile"] == profile])
        new = new.drop(columns=["_slug", "_journal"])
        if old is not None:
            drop = old["profile"] == profile
            if keep_other_shapes:  # a part re-ran some shapes: the others keep their older rows
                drop &= old["shape"].isin(set(new["shape"])) | (old["method"] == "ceiling")
            if from_journal:  # a run cut early: only the rows it re-measured replace stored ones
                remeasured = pd.MultiIndex.from_frame(new[KEY].astype(str))
                drop &= pd.MultiIndex.from_frame(old[KEY].astype(str)).isin(remeasured)
            new = pd.concat([old[~drop], new], ignore_index=True)
        write_atomic(new, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite")
    ap.add_argument("parts", nargs="+", type=Path)
    ap.add_argument("--into", type=Path, default=Path("results"))
    ap.add_argument(
        "--keep-other-shapes",
        action="store_true",
        help="keep the stored rows of shapes the parts did not re-run (each row keeps its commit)",
    )
    ap.add_argument(
        "--partial",
        action="store_true",
        help="take the finished rows of a part whose run stopped early from its journal (marked in 'command')",
    )
    args = ap.parse_args()
    print(f"wrote {merge(args.suite, args.parts, args.into, args.keep_other_shapes, args.partial)}")


if __name__ == "__main__":
    main()
