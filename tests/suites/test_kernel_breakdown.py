"""suites._kernel_breakdown: the rows a profile records read back as the same table (every
category, the replay gap), and the stacked bars draw with the legend below or to the right."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.kernel_profile import ORDER
from repro.plots import new_figure, save
from suites import _kernel_breakdown as kbr


def _rows(shape: str, method: str, cats: dict[str, float], graph_ms: float) -> list[dict]:
    rows: list[dict] = []

    def add(**kw: object) -> None:
        rows.append({"shape": shape, "variant": "", **kw})

    kbr.record(add, method, {c: cats.get(c, 0.0) for c in ORDER}, graph_ms, "cuda-graph-events-readflush")
    return rows


def test_recorded_rows_read_back_as_the_table():
    rows = _rows("gpt2-774m/N=5/seq=1024", "dense", {"GEMMs": 60.0, "attention": 20.0}, 81.0)
    rows += _rows("gpt2-774m/N=5/seq=1024", "fst", {"GEMMs": 50.0, "attention": 20.0, "MVUE pack": 1.5}, 70.5)
    df = pd.DataFrame(rows)
    assert set(df["metric"]) == set(kbr.METRICS)
    assert (df.loc[df["metric"] == "kernel_time", "timer"] == kbr.TIMER_REPLAY).all()  # a replay was timed
    kt = kbr.table(df).set_index("method")
    assert list(kt.columns) == ["shape", *ORDER, "gap", "graph_ms"]
    assert kt.loc["dense", "gap"] == pytest.approx(1.0) and kt.loc["fst", "gap"] == pytest.approx(-1.0)
    assert kt.loc["fst", "MVUE pack"] == 1.5 and kt.loc["dense", "MVUE pack"] == 0.0
    assert kbr.table(df[df["metric"] != "kernel_time"].iloc[:0]).empty


@pytest.mark.parametrize("legend", ["below", "right"])
def test_plot_draws_dense_beside_fst(tmp_path, legend):
    shape = "ffn/d=2048/n=2048/N=4"
    df = pd.DataFrame(_rows(shape, "dense", {"GEMMs": 2.0}, 2.5) + _rows(shape, "fst", {"GEMMs": 1.5}, 1.75))
    fig, (ax,) = new_figure(ncols=1)
    kbr.plot(ax, kbr.table(df), [shape], ["2048"], "d", "where time goes", legend=legend)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(labels) == ["GEMMs", "graph replay time"]  # categories that never ran are left out
    assert all(p.stat().st_size > 0 for p in save(fig, tmp_path / legend))


def test_the_profile_is_labelled_by_what_was_timed():
    """A graph-replay timing means the replay was profiled; a direct timing, an eager call."""
    assert kbr.profile_timer("cuda-graph-events-readflush") == kbr.TIMER_REPLAY
    assert kbr.profile_timer("cuda-events-readflush") == kbr.TIMER_EAGER
    rows: list[dict] = []
    kbr.record(lambda **kw: rows.append(kw), "dense", {"GEMMs": 1.0}, 1.2, "cuda-events-readflush")
    timers = {r["metric"]: r["timer"] for r in rows}
    assert timers == {
        "kernel_time": kbr.TIMER_EAGER,
        "kernel_time_total": kbr.TIMER_EAGER,
        "graph_time": "cuda-events-readflush",
    }
