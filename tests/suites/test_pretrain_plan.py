"""suites._pretrain: the scale said next to every training number."""

from __future__ import annotations

import pandas as pd

from suites._pretrain import scale_note


def test_scale_note_says_tokens_at_every_scale():
    df = pd.DataFrame(
        {
            "metric": ["val_loss", "val_loss", "train_loss_last5pct"],
            "shape": ["gpt2-124m/9830400tok", "llama-micro/128tok", "other/1tok"],
        }
    )
    assert scale_note(df) == "gpt2-124m, 9.8M tokens; llama-micro, 128 tokens"  # smoke: not "0.0M"
    assert scale_note(df.iloc[:0]) == "no runs"


def test_smoke_rows_test_no_claim_and_full_rows_do():
    """A smoke run (a few steps of a tiny model) must not print "holds: yes/no" for the paper's claims."""
    from pathlib import Path

    from repro.results import read_results
    from suites import _pretrain as P

    stored = Path(__file__).resolve().parents[2] / "results" / "nvidia-h100-80gb-hbm3" / "figure1.csv"
    full = read_results(stored) if stored.exists() else None
    if full is None:
        import pytest

        pytest.skip("no stored figure1 rows")
    assert set(P.claims_table(full, "figure1")["holds"]) <= {"yes", "no", "not measured"}
    smoke = full.assign(profile="smoke")
    assert set(P.claims_table(smoke, "figure1")["holds"]) == {"n/a (smoke)"}
    v = P.claims_verdict(smoke, "figure1", "tiny")
    assert v.status == "not comparable" and "no claim tested" in v.caveat
