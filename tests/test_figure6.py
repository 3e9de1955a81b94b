"""suites.figure6's tables from stored rows: speedup beside its GEMM-level ceiling and fst bound,
and the byte count behind the bound."""

from __future__ import annotations

import pandas as pd

from suites import figure6
from suites._training_bench import fst_min_extra_bytes


def test_min_extra_bytes_counts_weights_and_gradients():
    # d=2048, f=8192, T=2048: 6 B x 2 weights of d*f, 3 B x T*d (dY), 1 B x T*f (dH: read fused away)
    assert fst_min_extra_bytes(2048, 8192, 2048) == 6 * 2 * 2048 * 8192 + 3 * 2048 * 2048 + 2048 * 8192
    assert fst_min_extra_bytes(64, 256, 128) < fst_min_extra_bytes(64, 256, 256)


def test_compare_and_summary_carry_ceiling_and_bound():
    shape = "ffn/d=2048/n=2048/N=1"
    rows = [
        ("fst", "speedup_vs_dense", 0.94),
        ("weight24", "speedup_vs_dense", 0.97),
        ("fst", "gemm_ceiling_speedup", 1.31),
        ("fst", "fst_bound_speedup", 1.17),
    ]
    df = pd.DataFrame([{"shape": shape, "method": m, "metric": k, "value": v} for m, k, v in rows])
    t = figure6.compare(df)
    fst = t[t["method"] == "fst"].iloc[0]
    assert (fst["speedup"], fst["gemm_ceiling"], fst["fst_bound"]) == (0.94, 1.31, 1.17)
    assert t[t["method"] == "weight24"]["fst_bound"].isna().all()
    assert "fst bound 1.17-1.17x" in figure6.summary(df)
