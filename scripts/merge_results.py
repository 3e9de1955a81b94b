"""Merge a suite's rows from the results folders of separate runs (jobs of one campaign on several
GPUs, or parts of a suite split over machine starts, e.g. ``REPRO_TABLE8_MODELS``) into
``results/<device>/<suite>.csv``, replacing that device's rows of the same profile; then redraw
the suite's figures with ``python -m repro plot SUITE``.

    python3 scripts/merge_results.py SUITE RESULTS_ROOT [RESULTS_ROOT ...] [--into results]

Every part must hold rows of the same device and profile, and no two parts may share a row key
(method, variant, shape, dtype, metric): a duplicate would silently hide one measurement. The
device-ceiling rows every part measured are the exception: the first part's are kept.
``--keep-other-shapes``: a re-run of some shapes only (the others failed or did not finish) keeps
the stored rows of the other shapes, each with the commit it was measured at.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from repro.results import locked, read_results, write_atomic  # noqa: E402

KEY = ["method", "variant", "shape", "dtype", "metric"]


def merge(suite: str, parts: list[Path], into: Path, keep_other_shapes: bool = False) -> Path:
    frames = []
    for root in parts:
        found = sorted(root.glob(f"*/{suite}.csv"))
        if len(found) != 1:
            raise SystemExit(f"{root}: expected one */{suite}.csv, found {[str(f) for f in found]}")
        frames.append(read_results(found[0]).assign(_slug=found[0].parent.name))
    new = pd.concat(frames, ignore_index=True)
    for col in ("_slug", "profile"):
        if new[col].nunique() != 1:
            raise SystemExit(f"parts differ in {col.strip('_')}: {sorted(new[col].unique())}")
    # every part measured the device ceilings (copy bandwidth, GEMM rate): the first part's stand
    ceiling = new["method"] == "ceiling"
    new = new[~(ceiling & new.duplicated(KEY, keep="first"))]
    dup = new[new.duplicated(KEY, keep=False)]
    if len(dup):
        raise SystemExit(f"{len(dup)} rows share a key across parts, e.g.\n{dup[KEY].head().to_string()}")
    slug, profile = new["_slug"].iloc[0], new["profile"].iloc[0]
    new = new.drop(columns="_slug")
    path = into / slug / f"{suite}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        if path.exists():
            old = read_results(path)
            drop = old["profile"] == profile
            if keep_other_shapes:  # a part re-ran some shapes: the others keep their older rows
                drop &= old["shape"].isin(set(new["shape"])) | (old["method"] == "ceiling")
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
    args = ap.parse_args()
    print(f"wrote {merge(args.suite, args.parts, args.into, args.keep_other_shapes)}")


if __name__ == "__main__":
    main()
