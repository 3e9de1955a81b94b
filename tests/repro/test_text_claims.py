"""The papers' numeric text claims, each followed to where this project checks it
(``repro/paper_data/checks_text_claims.csv``): every claim has one check, a setting's value in the
code equals the paper's, a named test exists, a named artifact is one the overview lists."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pandas as pd
import pytest

from repro import paper
from repro.paper import CHECK_KINDS, paper_index, text_claim_checks

REPO = Path(__file__).resolve().parents[2]
CHECKS = text_claim_checks()


def test_every_claim_has_one_check() -> None:
    claims = paper.load_paper("text_claims")
    assert len(CHECKS) == len(claims) > 0
    assert set(CHECKS["kind"]) <= set(CHECK_KINDS)
    assert CHECKS["check_note"].str.len().gt(0).all()  # every check says what it is


@pytest.mark.parametrize("row", CHECKS[CHECKS["kind"] == "setting"].to_dict("records"), ids=lambda r: r["metric"])
def test_settings_equal_the_paper(row: dict) -> None:
    module, expr = row["where"].split(":", 1)
    value = eval(expr, vars(importlib.import_module(module)))  # noqa: S307 (our own data file)
    assert float(value) == pytest.approx(row["value"], rel=1e-9), (row["where"], value, row["value"])


@pytest.mark.parametrize("row", CHECKS[CHECKS["kind"] == "tested"].to_dict("records"), ids=lambda r: r["metric"])
def test_named_tests_exist(row: dict) -> None:
    path, name = row["where"].split("::")
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    assert name in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, row["where"]


def test_named_artifacts_exist_and_kinds_say_where() -> None:
    from suites import SUITES, get_suite

    known = set(map(tuple, paper_index()[["paper", "artifact"]].values)) | {
        (get_suite(n).PAPER, get_suite(n).ARTIFACT) for n in SUITES
    }
    for r in CHECKS.itertuples():
        if r.checked_by:
            assert tuple(r.checked_by.split(" ", 1)) in known, r.checked_by
        if r.kind == "measured":
            assert r.checked_by, r.metric
        if r.kind in ("setting", "tested"):
            assert r.where, r.metric


def test_unpaired_or_unknown_checks_refused(monkeypatch) -> None:
    read = paper._read_csv
    good = read("checks_text_claims.csv")
    for checks, error in (
        (good.iloc[1:], "do not pair up"),
        (pd.concat([good, good.iloc[:1]]), "more than one check"),
        (good.assign(kind="guessed"), "unknown kinds"),
    ):
        monkeypatch.setattr(
            paper, "_read_csv", lambda name, c=checks: c if name == "checks_text_claims.csv" else read(name)
        )
        with pytest.raises(ValueError, match=error):
            text_claim_checks()
