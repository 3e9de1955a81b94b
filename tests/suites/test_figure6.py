"""suites.figure6's tables from stored rows: speedup beside its GEMM-level ceiling and fst bound,
and the byte count behind the bound."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from suites import figure6
from suites._training_bench import fst_min_extra_bytes
from tests.helpers import ScriptedCtx, result_frame


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
    df = result_frame(shape, rows)
    t = figure6.compare(df)
    fst = t[t["method"] == "fst"].iloc[0]
    assert (fst["speedup"], fst["gemm_ceiling"], fst["fst_bound"]) == (0.94, 1.31, 1.17)
    assert t[t["method"] == "weight24"]["fst_bound"].isna().all()
    assert "fst bound 1.17-1.17x" in figure6.summary(df)


def test_compare_carries_the_range_over_rounds():
    shape = "block/d=2048/n=2048/N=8"
    rows = [
        ("fst", "speedup_vs_dense", 1.15),
        ("fst", "speedup_vs_dense_min", 1.11),
        ("fst", "speedup_vs_dense_max", 1.18),
        ("half", "speedup_vs_dense", 1.33),
    ]
    t = figure6.compare(result_frame(shape, rows)).set_index("method")
    assert (t.loc["fst", "speedup"], t.loc["fst", "speedup_min"], t.loc["fst", "speedup_max"]) == (1.15, 1.11, 1.18)
    assert pd.isna(t.loc["half", "speedup_min"])  # one round: no range


def test_measure_rounds_report_median_and_range():
    """Three rounds of (dense, half): the rows give the median time, the ratio of the medians and
    the range of the per-round ratios; every module is rebuilt and timed in every round."""
    times = [2.0, 1.0, 3.0, 1.0, 2.4, 1.6]  # round by round: dense, half
    ctx = ScriptedCtx(times)
    cfg = figure6._cfg(64, figure6.SMOKE_N)
    ms = figure6._measure(ctx, "ffn", cfg, 1, figure6.SMOKE_N, ("half",), rounds=3)
    assert ms == {"dense": 2.4, "half": 1.0}
    got = ctx.values()
    assert got["dense", "fwd_bwd_time"] == 2.4 and got["dense", "fwd_bwd_time_min"] == 2.0
    assert got["dense", "fwd_bwd_time_max"] == 3.0
    assert got["half", "speedup_vs_dense"] == 2.4
    assert got["half", "speedup_vs_dense_min"] == pytest.approx(1.5) and got["half", "speedup_vs_dense_max"] == 3.0
    assert "[1.50-3.00]" in ctx.msg
    one = ScriptedCtx([2.0, 1.0])
    figure6._measure(one, "ffn", cfg, 1, figure6.SMOKE_N, ("half",), rounds=1)
    assert not any(r["metric"].endswith(("_min", "_max")) for r in one.rows)


def test_measure_with_compiled_runs_reports_the_best_dense_headline():
    """Rounds of (dense, half, dense_compiled): per round the faster dense module (2.0, 2.5, 2.4
    -> median 2.4) is the base of ``speedup_vs_best_dense``; dense_compiled itself gets only its
    ratio to eager dense; real builds (compiled ones included) pass their twin checks."""
    times = [2.0, 1.0, 2.2, 3.0, 1.0, 2.5, 2.4, 1.6, 2.6]  # round by round: dense, half, dense_compiled
    ctx = ScriptedCtx(times)
    cfg = figure6._cfg(64, figure6.SMOKE_N)
    figure6._measure(ctx, "ffn", cfg, 1, figure6.SMOKE_N, ("half",), rounds=3, extra=("dense_compiled",))
    got = ctx.values()
    assert got["half", "speedup_vs_best_dense"] == pytest.approx(2.4 / 1.0)
    assert got["half", "speedup_vs_dense"] == pytest.approx(2.4 / 1.0)
    assert got["dense_compiled", "speedup_vs_dense"] == pytest.approx(2.4 / 2.5)
    assert ("dense_compiled", "speedup_vs_best_dense") not in got
    t = figure6.compare(pd.DataFrame(ctx.rows).assign(shape="ffn/d=64/n=32/N=1")).set_index("method")
    assert t.loc["half", "vs_best_dense"] == pytest.approx(2.4)


def test_compare_gives_a_blocks_ffn_share_and_the_bound_it_implies():
    """A block of d=2048, n=1024, N=4 runs the FFN of ffn/d=2048/n=2048/N=2 (4096 tokens each)."""
    ffn = result_frame(
        "ffn/d=2048/n=2048/N=2",
        [("dense", "fwd_bwd_time", 1.5), ("fst", "speedup_vs_dense", 1.25)],
    )
    blk = result_frame(
        "block/d=2048/n=1024/N=4",
        [("dense", "fwd_bwd_time", 3.0), ("fst", "speedup_vs_dense", 1.10), ("half", "speedup_vs_dense", 1.3)],
    )
    lone = result_frame("block/d=1024/n=1024/N=4", [("dense", "fwd_bwd_time", 2.0), ("fst", "speedup_vs_dense", 1.0)])
    t = figure6.compare(pd.concat([ffn, blk, lone], ignore_index=True))
    row = t[(t["kind"] == "block") & (t["method"] == "fst") & (t["d"] == 2048)].iloc[0]
    assert row["ffn_share"] == pytest.approx(0.5)
    assert row["block_bound_from_ffn"] == pytest.approx(1.0 / (0.5 + 0.5 / 1.25))
    assert t[t["method"] == "half"]["ffn_share"].isna().all()  # fst rows only
    assert t[(t["d"] == 1024)]["ffn_share"].isna().all()  # no FFN of that d and token count


def _kernel_rows(shape: str, method: str, cats: dict[str, float], graph: float) -> pd.DataFrame:
    row = {"shape": shape, "method": method}
    rows = [row | {"metric": "kernel_time", "variant": c, "value": v} for c, v in cats.items()]
    rows.append(row | {"metric": "kernel_time_total", "variant": "", "value": sum(cats.values())})
    rows.append(row | {"metric": "graph_time", "variant": "", "value": graph})
    return pd.DataFrame(rows)


def test_plot_draws_the_kernel_breakdown_panel(tmp_path):
    """With kernel_time rows (dense and fst of one FFN shape) the figure gets its breakdown panel,
    read through suites._kernel_breakdown.table; without them, it draws as before."""
    from suites import _kernel_breakdown as kbr

    shape = "ffn/d=2048/n=2048/N=4"
    df = pd.concat(
        [
            _kernel_rows(shape, "dense", {"GEMMs": 2.0, "activation": 0.25, "casts": 0.125}, 2.5),
            _kernel_rows(shape, "fst", {"GEMMs": 1.5, "MVUE pack": 0.125, "activation": 0.125}, 1.625),
        ]
    )
    kt = kbr.table(df).set_index("method")
    assert kt.loc["dense", "gap"] == pytest.approx(0.125) and kt.loc["fst", "gap"] == pytest.approx(-0.125)
    speed = result_frame(shape, [("fst", "speedup_vs_dense", 1.3)])
    meta = {"device": "nvidia-h100-80gb-hbm3", "profile": "full"}
    for frame, name in ((pd.concat([df, speed]), "with"), (speed.assign(variant=""), "without")):
        paths = figure6.plot(frame.assign(**meta), tmp_path / name)
        assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert kbr.table(speed.assign(variant="")).empty


def test_amp_dtype_option(monkeypatch):
    """REPRO_AMP_DTYPE=fp16 runs the paper's precision; rows say which ran; a bad name is refused."""
    from suites._training_bench import amp_dtype

    monkeypatch.delenv("REPRO_AMP_DTYPE", raising=False)
    assert amp_dtype() == torch.bfloat16 and figure6._dtype_label(torch.device("cuda")) == "bf16-amp"
    monkeypatch.setenv("REPRO_AMP_DTYPE", "fp16")
    assert amp_dtype() == torch.float16 and figure6._dtype_label(torch.device("cuda")) == "fp16-amp"
    assert figure6._dtype_label(torch.device("cpu")) == "fp32"
    monkeypatch.setenv("REPRO_AMP_DTYPE", "fp8")
    with pytest.raises(ValueError, match="REPRO_AMP_DTYPE"):
        amp_dtype()


def test_a_ratio_needs_both_sides_timed_alike_in_every_round():
    """Every row carried the last timed module's timer, and a speedup could divide a graph replay's
    time by an uncaptured launch's (a capture that breaks times every later call uncaptured)."""
    from repro.timing import Timing

    class Ctx(ScriptedCtx):
        timers = iter(["graph", "graph", "graph", "uncaptured"])  # round by round: dense, half

        def time(self, fn, graph: bool = True):  # noqa: ANN001, ANN201
            t = super().time(fn, graph)
            return Timing(ms=t.ms, timer=next(self.timers), reps=1)

    ctx = Ctx([2.0, 1.0, 2.0, 1.0])
    cfg = figure6._cfg(64, figure6.SMOKE_N)
    figure6._measure(ctx, "ffn", cfg, 1, figure6.SMOKE_N, ("half",), rounds=2)
    timer = {(r["method"], r["metric"]): r.get("timer") for r in ctx.rows}
    assert timer["dense", "fwd_bwd_time"] == "graph"
    assert timer["half", "fwd_bwd_time"] == "mixed:graph+uncaptured"
    assert ("half", "speedup_vs_dense") not in timer
