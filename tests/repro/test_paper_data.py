"""Checks on the published-number tables in repro/paper_data and their loader."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from repro.paper import INDEX_COLUMNS, PAPER_COLUMNS, load_paper, paper_index

DATA_DIR = Path(__file__).resolve().parents[2] / "repro" / "paper_data"
# claims_<paper>.csv holds qualitative claims (repro.paper.load_claims), checks_text_claims.csv where
# the text's claims are checked (repro.paper.text_claim_checks): neither holds published values
DATA_FILES = sorted(
    p for p in DATA_DIR.glob("*.csv") if p.name != "index.csv" and not p.name.startswith(("claims_", "checks_"))
)
KEY = ["paper", "artifact", "method", "shape", "dtype", "metric"]


def _raw(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _one(df: pd.DataFrame, **where: str) -> float:
    mask = pd.Series(True, index=df.index)
    for col, val in where.items():
        mask &= df[col] == val
    hit = df[mask]
    assert len(hit) == 1, f"{where}: {len(hit)} rows"
    return float(hit["value"].iloc[0])


def test_data_files_exist() -> None:
    assert DATA_FILES


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: p.name)
def test_csv_schema(path: Path) -> None:
    df = _raw(path)
    assert tuple(df.columns) == PAPER_COLUMNS
    assert len(df) > 0
    assert not df.isna().any().any()
    for col in ("paper", "artifact", "source", "method", "metric", "value", "unit"):
        assert (df[col].str.strip() != "").all(), f"empty {col}"
    values = df["value"].astype(float)
    assert values.map(math.isfinite).all()
    assert (df["paper"] + "_" + df["artifact"] + ".csv" == path.name).all()
    assert not df.duplicated(KEY).any(), df[df.duplicated(KEY, keep=False)]


def test_index() -> None:
    idx = paper_index()
    assert tuple(idx.columns) == INDEX_COLUMNS
    assert not idx.isna().any().any()
    assert not idx.duplicated(["paper", "artifact"]).any()
    listed = {f for f in idx["file"] if f}
    for name in listed:
        assert (DATA_DIR / name).is_file(), name
    assert listed == {p.name for p in DATA_FILES}
    empty = idx[idx["file"] == ""]
    assert (empty["status_note"] != "").all()
    figs = idx[idx["artifact"].str.startswith("figure") & (idx["file"] == "")]
    assert (figs["status_note"] == "values not stated in text").all()
    assert {"hu2024", "fast", "madhyastha2026"} <= set(idx["paper"])


def test_loader_all_and_filters() -> None:
    df = load_paper()
    assert tuple(df.columns) == PAPER_COLUMNS
    assert df["value"].dtype == float
    assert not df.isna().any().any()
    assert len(df) == sum(len(_raw(p)) for p in DATA_FILES)
    both = load_paper("table1")
    assert set(both["paper"]) == {"hu2024", "fast"}
    assert set(load_paper("table1", paper="fast")["paper"]) == {"fast"}
    assert set(load_paper(paper="madhyastha2026")["artifact"]) == {"text_claims"}


def test_loader_unknown_names() -> None:
    with pytest.raises(ValueError, match="known artifacts"):
        load_paper("table99")
    with pytest.raises(ValueError, match="known artifacts"):
        load_paper("figure1", paper="hu2024")
    with pytest.raises(ValueError, match="known papers"):
        load_paper(paper="nope2020")


def test_hu_table2() -> None:
    df = load_paper("table2", paper="hu2024")
    assert len(df) == 28
    assert df["shape"].nunique() == 7
    assert set(df["method"]) == {"approx2", "exhaustive"}
    assert set(df["dtype"]) == {"fp16", "fp32"}
    assert set(df["unit"]) == {"TB/s"}
    assert set(df["device"]) == {"RTX3090"}
    assert "30768x8192" in set(df["shape"])
    assert _one(df, method="exhaustive", dtype="fp16", shape="3072x768") == 69.2
    assert _one(df, method="approx2", dtype="fp32", shape="4096x1024") == 38.4
    assert _one(df, method="exhaustive", dtype="fp32", shape="30768x8192") == 145.1
    assert _one(df, method="exhaustive", dtype="fp16", shape="5120x1280") == 91.0


def test_hu_table3() -> None:
    df = load_paper("table3", paper="hu2024")
    assert len(df) == 14
    assert df["shape"].nunique() == 7
    assert set(df["method"]) == {"intuitive", "ours"}
    assert _one(df, method="intuitive", shape="32x512x4096") == 11.8
    assert _one(df, method="ours", shape="32x512x8192") == 56.2


def test_hu_other_tables() -> None:
    t4 = load_paper("table4", paper="hu2024")
    assert _one(t4, method="ours", metric="glue_score") == 79.6
    assert _one(t4, method="half", metric="loss") == 2.1280
    assert _one(t4, method="dense", metric="glue_mrpc_second") == 86.1
    t5 = load_paper("table5", paper="hu2024")
    assert set(t5["shape"]) == {"gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1558m"}
    assert _one(t5, method="ours", shape="gpt2-1558m", metric="glue_wnli") == 12.7
    assert _one(t5, method="dense", shape="gpt2-124m", metric="glue_rte") == 61.3
    t8 = load_paper("table8", paper="hu2024")
    assert _one(t8, shape="gpt2-774m", metric="speedup") == 1.2
    assert _one(t8, shape="gpt2-774m", metric="batch_size") == 5
    t1 = load_paper("table1", paper="hu2024")
    assert _one(t1, shape="bert-base") == pytest.approx(6e-6)


def test_fast_numbers() -> None:
    t1 = load_paper("table1", paper="fast")
    assert len(t1) == 25
    assert _one(t1, method="tbs_8_8", metric="geomean") == 0.45
    f3 = load_paper("figure3", paper="fast")
    assert _one(f3, metric="kernel_speedup_vs_pytorch") == 17.03
    assert _one(f3, metric="kernel_speedup_vs_vegeta") == 1.25
    assert _one(f3, metric="e2e_speedup_vs_pytorch") == 10.40
    assert _one(f3, metric="e2e_speedup_vs_vegeta") == 1.56


def test_madhyastha_numbers() -> None:
    df = load_paper(paper="madhyastha2026")
    assert _one(df, metric="e2e_speedup_min") == 1.4
    assert _one(df, metric="e2e_speedup_max") == 1.7


def test_claims_load_and_hold_checks():
    """Every qualitative claim of Hu et al.'s figures loads with a known relation and a threshold,
    names a measured metric, and claim_holds reads NaN as not measured."""
    from repro.paper import RELATIONS, claim_holds, load_claims

    for artifact in ("figure1", "figure2", "hu_figure3", "figure10"):
        c = load_claims("hu2024", artifact)
        assert len(c) and set(c["relation"]) <= set(RELATIONS) and c["threshold"].notna().all()
        assert c["metric"].str.fullmatch(r"[a-z0-9_]+").all() and c["statement"].str.len().gt(10).all()
    assert claim_holds(">", 2.0, 1.0) is True and claim_holds("<", 2.0, 1.0) is False
    assert claim_holds("==", float("nan"), 1.0) is None
    with pytest.raises(ValueError, match="no claims"):
        load_claims("hu2024", "table8")
