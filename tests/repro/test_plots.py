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
