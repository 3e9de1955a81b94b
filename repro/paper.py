"""Published numbers of the reproduced papers, as tidy data.

Each table or figure lives in ``repro/paper_data/<paper>_<artifact>.csv`` with the columns in
:data:`PAPER_COLUMNS`; ``index.csv`` lists every table and figure of every paper, including those
whose values are not stated in the text (empty ``file``).

Column conventions:

- ``shape``: the input shape as printed (``x`` separators) for kernel measurements; for model-level
  results (accuracy, loss, end-to-end speedup) it holds the model label instead, e.g. ``gpt2-124m``.
- ``metric``: what ``value`` measures; ``*_pm`` metrics are the printed +/- half-widths.
- ``unit``: the paper's unit as printed (``x`` for ratios); ``dimensionless`` where none is printed.
- empty strings (not NaN) mark fields that do not apply.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import pandas as pd

__all__ = [
    "CHECK_COLUMNS",
    "CHECK_KINDS",
    "CLAIM_COLUMNS",
    "INDEX_COLUMNS",
    "PAPER_COLUMNS",
    "claim_holds",
    "load_claims",
    "load_paper",
    "paper_index",
    "text_claim_checks",
]

PAPER_COLUMNS: tuple[str, ...] = (
    "paper",
    "artifact",
    "source",
    "method",
    "shape",
    "dtype",
    "metric",
    "value",
    "unit",
    "device",
    "notes",
)
INDEX_COLUMNS: tuple[str, ...] = ("paper", "artifact", "source", "title", "file", "status_note")

_PACKAGE = "repro.paper_data"
_INDEX_FILE = "index.csv"


def _read_csv(name: str) -> pd.DataFrame:
    with resources.files(_PACKAGE).joinpath(name).open("r", encoding="utf-8", newline="") as fh:
        return pd.read_csv(fh, dtype=str, keep_default_na=False)


@lru_cache(maxsize=1)
def _index() -> pd.DataFrame:
    df = _read_csv(_INDEX_FILE)
    if tuple(df.columns) != INDEX_COLUMNS:
        raise ValueError(f"{_INDEX_FILE}: columns {list(df.columns)} != {list(INDEX_COLUMNS)}")
    return df


@lru_cache(maxsize=1)
def _all_rows() -> pd.DataFrame:
    files = [f for f in _index()["file"] if f]
    frames = []
    for name in files:
        df = _read_csv(name)
        if tuple(df.columns) != PAPER_COLUMNS:
            raise ValueError(f"{name}: columns {list(df.columns)} != {list(PAPER_COLUMNS)}")
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out["value"] = out["value"].astype(float)
    return out


def paper_index() -> pd.DataFrame:
    """Every table and figure of every paper (``file`` is empty where no values are stored)."""
    return _index().copy()


def load_paper(artifact: str | None = None, paper: str | None = None) -> pd.DataFrame:
    """Published rows, optionally filtered by ``artifact`` (``"table2"``) and ``paper`` (``"hu2024"``).

    ``value`` is float; the other columns are strings (empty where not applicable). An artifact name
    such as ``"table1"`` may exist for several papers; pass ``paper`` to pick one.
    Raises ValueError for an unknown paper or an artifact with no stored values.
    """
    df = _all_rows()
    if paper is not None:
        papers = sorted(df["paper"].unique())
        if paper not in papers:
            raise ValueError(f"unknown paper {paper!r}; known papers: {', '.join(papers)}")
        df = df[df["paper"] == paper]
    if artifact is not None:
        known = sorted(df["artifact"].unique())
        if artifact not in known:
            idx = _index()
            if paper is not None:
                idx = idx[idx["paper"] == paper]
            why = "has no stored values" if artifact in set(idx["artifact"]) else "is unknown"
            scope = f" of paper {paper!r}" if paper is not None else ""
            raise ValueError(f"artifact {artifact!r}{scope} {why}; known artifacts with values: {', '.join(known)}")
        df = df[df["artifact"] == artifact]
    return df.reset_index(drop=True).copy()


CLAIM_COLUMNS: tuple[str, ...] = (
    "artifact",
    "claim",
    "source",
    "statement",
    "metric",
    "relation",
    "threshold",
    "why_threshold",
)
RELATIONS = {
    ">": float.__gt__,
    "<": float.__lt__,
    "==": float.__eq__,
    "|x-1|<=": lambda x, t: abs(x - 1.0) <= t,  # a ratio within t of 1 either way ("no effect")
}


def load_claims(paper: str, artifact: str) -> pd.DataFrame:
    """The qualitative claims a paper makes about a figure that prints no numbers
    (``claims_<paper>.csv``), each as a testable statement: ``metric relation threshold``, with
    the reason for the threshold (the paper's words rarely give one). ``threshold`` is float."""
    df = _read_csv(f"claims_{paper}.csv")
    if tuple(df.columns) != CLAIM_COLUMNS:
        raise ValueError(f"claims_{paper}.csv: columns {list(df.columns)} != {list(CLAIM_COLUMNS)}")
    bad = sorted(set(df["relation"]) - set(RELATIONS))
    if bad:
        raise ValueError(f"claims_{paper}.csv: unknown relations {bad}; known: {sorted(RELATIONS)}")
    df = df[df["artifact"] == artifact].reset_index(drop=True)
    if df.empty:
        raise ValueError(f"no claims stored for {paper} {artifact}")
    df["threshold"] = df["threshold"].astype(float)
    return df


def claim_holds(relation: str, ours: float, threshold: float) -> bool | None:
    """Whether ``ours relation threshold`` holds; None where ours is NaN (not measured)."""
    if ours != ours:  # NaN
        return None
    return bool(RELATIONS[relation](float(ours), float(threshold)))


CHECK_COLUMNS: tuple[str, ...] = ("paper", "method", "metric", "kind", "checked_by", "where", "note")
# measured: an artifact of ours measures the same quantity (``checked_by``: "<paper> <artifact>");
# setting: we run with the paper's value (``where``: "module:expression" that evaluates to it);
# tested: a test checks it (``where``: its pytest node id); context: nothing here to measure;
# not built: what it needs is not in this project (``note`` says what).
CHECK_KINDS: tuple[str, ...] = ("measured", "setting", "tested", "context", "not built")
_CHECKS_FILE = "checks_text_claims.csv"


def text_claim_checks(paper: str | None = None) -> pd.DataFrame:
    """Every numeric claim of the papers' text (their ``text_claims`` artifacts) beside where this
    project checks it (``checks_text_claims.csv``): the claim's rows of :data:`PAPER_COLUMNS` plus
    ``kind``, ``checked_by``, ``where`` and ``check_note``. A claim without exactly one check row, a
    check without its claim, or an unknown kind is a ValueError: the dashboard must not drop one."""
    checks = _read_csv(_CHECKS_FILE)
    if tuple(checks.columns) != CHECK_COLUMNS:
        raise ValueError(f"{_CHECKS_FILE}: columns {list(checks.columns)} != {list(CHECK_COLUMNS)}")
    bad = sorted(set(checks["kind"]) - set(CHECK_KINDS))
    if bad:
        raise ValueError(f"{_CHECKS_FILE}: unknown kinds {bad}; known: {list(CHECK_KINDS)}")
    key = ["paper", "method", "metric"]
    dup = checks[checks.duplicated(key, keep=False)]
    if not dup.empty:
        raise ValueError(f"{_CHECKS_FILE}: more than one check for {dup[key].drop_duplicates().values.tolist()}")
    claims = _all_rows()
    claims = claims[claims["artifact"] == "text_claims"].assign(_order=lambda d: range(len(d)))
    merged = claims.merge(checks.rename(columns={"note": "check_note"}), on=key, how="outer", indicator=True)
    missing = merged[merged["_merge"] != "both"]
    if not missing.empty:
        rows = missing[[*key, "_merge"]].values.tolist()
        raise ValueError(f"{_CHECKS_FILE}: claims and checks do not pair up (left_only: no check): {rows}")
    merged = merged.sort_values("_order").drop(columns=["_merge", "_order"])
    if paper is not None:
        merged = merged[merged["paper"] == paper]
    return merged.reset_index(drop=True)
