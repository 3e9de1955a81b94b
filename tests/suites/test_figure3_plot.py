"""figure3's plot: one legend for the figure (none inside a panel, where it hid bars), each
strongest-baseline ratio printed on its bar, the results' commit in the title."""

from __future__ import annotations

import warnings
from unittest import mock

import matplotlib.pyplot as plt
import pandas as pd

from suites import figure3


def _rows() -> pd.DataFrame:
    rows = []
    for model in ("map-neo-460m", "map-neo-7b"):
        for variant, fast, base in (("TBS(8,8)", 5.0, 200.0), ("2:4", 0.5, 0.6)):
            for method, ms in (("fast", fast), ("torch_compiled", base), ("vegeta_compiled", base * 1.1)):
                rows.append({"shape": model, "variant": variant, "method": method, "metric": "time", "value": ms})
                rows.append(
                    {"shape": model, "variant": variant, "method": method, "metric": "pct_of_copy", "value": 10.0}
                )
            for metric, ratio in (("speedup_vs_torch", base / fast), ("speedup_vs_vegeta", 1.1 * base / fast),
                                  ("speedup_vs_strongest", base / fast)):  # fmt: skip
                rows.append({"shape": model, "variant": variant, "method": "fast", "metric": metric, "value": ratio})
    return pd.DataFrame(rows).assign(device="nvidia-h200", profile="full", git_commit="333b7e2ec2")


def test_plot_keeps_legends_off_the_bars_and_prints_the_ratios(tmp_path) -> None:
    figs = []

    def keep(fig, stem):
        figs.append(fig)
        return [stem.with_suffix(".png")]

    with mock.patch.object(figure3, "save", keep):
        figure3.plot(_rows(), tmp_path / "figure3")
    (fig,) = figs
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert "paper avg 17.03x" in labels and any(s.startswith("vs the strongest") for s in labels)
    printed = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert printed == ["40.0x", "1.20x", "40.0x", "1.20x"]
    assert "333b7e2" in fig._suptitle.get_text()  # Figure.get_suptitle needs matplotlib 3.8; we allow 3.7
    assert "end to end" in fig.axes[1].get_title()
    plt.close(fig)


def test_plot_writes_both_files(tmp_path) -> None:
    paths = figure3.plot(_rows(), tmp_path / "figure3")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 0 for p in paths)


def test_training_rows_leave_a_ratio_over_a_zero_time_blank() -> None:
    """A window with no regeneration has zero mask time: its ratios are blank, not NaN with a
    numpy warning (the smoke profile's every-10 rows once did this)."""
    rows = [
        {"shape": "smoke-64", "variant": "TBS(8,8) every=10", "method": m, "metric": metric, "value": v}
        for m, step in (("fast", 5.0), ("torch", 4.0), ("vegeta", 4.5))
        for metric, v in (("step_time", step), ("mask_time_per_step", 0.0))
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = figure3._training_rows(pd.DataFrame(rows)).set_index("pattern")
    masks = t[t.index.str.endswith("mask ms per step")].iloc[0]
    assert masks[["fast_vs_torch", "fast_vs_vegeta", "fast_vs_strongest"]].isna().all()
    step = t[t.index.str.endswith(": step ms")].iloc[0]
    assert step["fast_vs_torch"] == 4.0 / 5.0 and step["fast_vs_strongest"] == 4.0 / 5.0
