"""Matplotlib helpers with one house style: paper values hatched, ours solid, one colour per method."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
STYLE = {
    "figure.dpi": 110,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 9,
    "legend.frameon": False,
}


def grouped_bars(
    ax: plt.Axes,
    groups: list[str],
    series: dict[str, list[float]],
    *,
    hatched: set[str] | frozenset[str] = frozenset(),
    ylabel: str = "",
    title: str = "",
    log: bool = False,
    ranges: dict[str, tuple[list[float], list[float]]] | None = None,
) -> None:
    """Bars per group, one bar per series; series named in ``hatched`` are drawn hatched (paper);
    a series in ``ranges`` (lows, highs) gets error bars from low to high (NaN: none). A series
    without one finite value is left out (no empty slot, no legend entry for bars not drawn)."""
    series = {k: v for k, v in series.items() if any(math.isfinite(x) for x in v)}
    n = max(1, len(series))
    width = 0.8 / n
    ranges = ranges or {}
    for i, (name, vals) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        yerr = None
        if name in ranges and any(math.isfinite(lo) for lo in ranges[name][0]):
            lows, highs = ranges[name]
            yerr = [
                [v - lo if math.isfinite(v - lo) else 0.0 for v, lo in zip(vals, lows, strict=True)],
                [hi - v if math.isfinite(hi - v) else 0.0 for v, hi in zip(vals, highs, strict=True)],
            ]
        ax.bar(
            xs,
            vals,
            width,
            yerr=yerr,
            capsize=2 if yerr is not None else 0,
            error_kw={"lw": 0.8},
            label=name,
            color=PALETTE[i % len(PALETTE)],
            hatch="//" if name in hatched else None,
            alpha=0.55 if name in hatched else 1.0,
            edgecolor="black",
            linewidth=0.4,
        )
    if log:
        ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi * (10 if log else 1.3))  # headroom for the legend
    ax.set_xticks(range(len(groups)), groups, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", ncol=2)


def new_figure(
    ncols: int = 1, width: float = 5.0, height: float = 3.4, nrows: int = 1
) -> tuple[plt.Figure, list[plt.Axes]]:
    """A figure of ``nrows`` x ``ncols`` panels of ``width`` x ``height`` inches each; the axes in
    reading order (row by row)."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat:
        for k, v in STYLE.items():
            if k == "axes.grid":
                ax.grid(v, alpha=STYLE["grid.alpha"])
        ax.spines["top"].set_visible(False)
        ax.spines["right"].set_visible(False)
    return fig, flat


# No date, no software version, no random ids: the same figure gives the same bytes on every
# redraw, so redrawing committed figures from unchanged results leaves git clean.
_METADATA = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
}
_DETERMINISTIC_RC = {"svg.hashsalt": "repro", "svg.id": None}


def save(fig: plt.Figure, stem: Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.svg`` (byte for byte the same for the same figure); return both paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    rc = {k: v for k, v in _DETERMINISTIC_RC.items() if k in matplotlib.rcParams}
    with matplotlib.rc_context(rc):
        for p in paths:
            fmt = p.suffix[1:]
            # bbox_inches="tight" keeps legends placed beside the axes
            fig.savefig(p, bbox_inches="tight", metadata=_METADATA.get(fmt))
    plt.close(fig)
    return paths
