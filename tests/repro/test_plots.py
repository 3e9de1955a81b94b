"""Figures are saved deterministically: the same figure saved twice gives the same bytes, with no
date, software version or random SVG ids, so redrawing committed figures leaves git clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.plots import grouped_bars, new_figure, save


def _draw(stem: Path) -> list[Path]:
    fig, (ax,) = new_figure()
    grouped_bars(
        ax,
        ["a", "b", "c"],
        {"paper": [1.0, 2.0, 3.0], "ours": [1.5, 2.5, 2.0]},
        hatched={"paper"},
        ylabel="GB/s",
        title="demo",
        ranges={"ours": ([1.2, 2.0, 1.8], [1.7, 2.9, 2.1])},
    )
    return save(fig, stem)


def test_save_is_byte_identical(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1000000000")
    first = _draw(tmp_path / "one" / "fig")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # a later run on another day
    second = _draw(tmp_path / "two" / "fig")
    assert [p.suffix for p in first] == [".png", ".svg"]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.suffix
    svg = first[1].read_text(encoding="utf-8")
    assert "<dc:date>" not in svg
    assert b"Software" not in first[0].read_bytes()


@pytest.mark.parametrize("salt", ["x", None])
def test_save_ignores_caller_hashsalt(tmp_path: Path, salt) -> None:
    import matplotlib

    a = _draw(tmp_path / "a" / "fig")
    with matplotlib.rc_context({"svg.hashsalt": salt}):
        b = _draw(tmp_path / "b" / "fig")
    assert a[1].read_bytes() == b[1].read_bytes()


def test_a_series_without_data_gets_no_slot_and_no_legend_entry() -> None:
    """A method a device never measured (all NaN) must not leave an empty legend entry."""
    import matplotlib.pyplot as plt

    fig, (ax,) = new_figure()
    nan = float("nan")
    grouped_bars(ax, ["a", "b"], {"eager": [1.0, 2.0], "compiled": [nan, nan], "fast": [0.5, nan]})
    assert [t.get_text() for t in ax.legend().get_texts()] == ["eager", "fast"]
    assert len(ax.patches) == 4  # two series of two groups (a NaN bar is a patch that draws nothing)
    plt.close(fig)


def test_table2_roofline_panel_keeps_cells_without_a_like_timed_ratio(tmp_path: Path, monkeypatch) -> None:
    """table2's ratio panel needs both kernels timed alike; its roofline panel only the exhaustive
    kernel's % of copy, so a cell without a ratio still has its roofline bar (the H200 figure had
    lost 6 of its 14 cells)."""
    import suites.table2 as t2
    from repro.results import read_results

    p = Path(__file__).resolve().parents[2] / "results" / "nvidia-h200" / "table2.csv"
    if not p.exists():
        pytest.skip("no stored H200 table2 rows")
    df = read_results(p)
    drawn: list[list[str]] = []
    monkeypatch.setattr(t2, "grouped_bars", lambda ax, groups, series, **kw: drawn.append(list(groups)))
    t2.plot(df, tmp_path / "table2")
    table = t2.compare(df)
    assert len(drawn[0]) == table["our_ratio"].notna().sum()
    assert len(drawn[1]) == table["exhaustive_pct_copy"].notna().sum() > len(drawn[0])
