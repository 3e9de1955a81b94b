"""Where a training call's time goes, shared by figure6 (one FFN) and table8 (a whole step): the
device kernels of one call by category (``repro.kernel_profile``) beside the graph-replay time of
the same module, recorded as rows, read back as a table, drawn as stacked bars with the replay
time marked. The call profiled is the one that was timed (``RunContext.time_kept``: the graph's
replay), not an eager call of the module: eager calls can run other kernels (at GPT-2 774M the
eager optimizer kernels took 9 ms more than the replayed ones), and then the bars do not add up
to the time they explain.

Rows (unit ms): ``kernel_time`` (``variant`` = the category), ``kernel_time_total`` and
``graph_time``; the table's ``gap`` is the replay time minus the kernels' sum."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import matplotlib
import pandas as pd
import torch

from repro.kernel_profile import ORDER, by_category, kernel_times

TIMER_REPLAY = "torch.profiler-graph-replay-1call"  # kernel durations inside one replay, after warm-up
TIMER_EAGER = "torch.profiler-eager-1call"  # ... of one eager call (where the timed call was not captured)
METRICS = ("kernel_time", "kernel_time_total", "graph_time")


def profile(call: Callable[[], object], device: torch.device) -> dict[str, float]:
    """Milliseconds per kernel category of one call of ``call`` (after warm-up calls): pass the
    call that was timed (the replay from ``RunContext.time_kept``)."""
    return by_category(kernel_times(call, device))


def profile_timer(timer: str) -> str:
    """The timer of a profile of the call that ``timer`` timed: a graph replay's, or an eager call's."""
    return TIMER_REPLAY if timer.startswith("cuda-graph") else TIMER_EAGER


def record(add: Callable[..., None], method: str, cats: dict[str, float], graph_ms: float, timer: str) -> None:
    """Add the rows of one profile through ``add`` (keyword arguments of ``Results.add`` other than
    shape, dtype, verified); ``graph_ms`` is the time of the profiled call, measured by ``timer``."""
    for cat, ms in cats.items():
        add(method=method, metric="kernel_time", variant=cat, value=ms, unit="ms", timer=profile_timer(timer))
    add(method=method, metric="kernel_time_total", value=sum(cats.values()), unit="ms", timer=profile_timer(timer))
    add(method=method, metric="graph_time", value=graph_ms, unit="ms", timer=timer)


def table(df: pd.DataFrame) -> pd.DataFrame:
    """Per shape and method: ms per category (0 where none ran), ``gap`` and ``graph_ms``."""
    k = df[df["metric"].isin(METRICS)]
    rows = []
    for (shape, method), g in k.groupby(["shape", "method"], sort=False):
        cats = g[g["metric"] == "kernel_time"].set_index("variant")["value"]
        total = float(g.loc[g["metric"] == "kernel_time_total", "value"].iloc[0])
        graph = float(g.loc[g["metric"] == "graph_time", "value"].iloc[0])
        row = {"shape": shape, "method": method} | {c: float(cats.get(c, 0.0)) for c in ORDER}
        rows.append(row | {"gap": graph - total, "graph_ms": graph})
    return pd.DataFrame(rows, columns=["shape", "method", *ORDER, "gap", "graph_ms"])


def plot(
    ax, kb: pd.DataFrame, shapes: Sequence[str], labels: Sequence[str], xlabel: str, title: str, legend: str = "below"
) -> None:
    """Stacked bars of the kernels by category, dense (D) and fst (F) side by side per shape, as
    shares of the dense replay time; a black tick marks each module's own replay time (above the
    stack by the time the replay spends between kernels; inside it where the profiled replay ran
    slower than the timed median). Categories that never ran are left out."""
    parts = [c for c in ORDER if (kb[c].abs() > 0).any()]
    palette = matplotlib.colormaps["tab20"].colors  # one fixed colour per category, in every figure
    colors = {p: palette[i % len(palette)] for i, p in enumerate(ORDER)}
    labelled: set[str] = set()
    for i, shape in enumerate(shapes):
        g = kb[kb["shape"] == shape].set_index("method")
        if "dense" not in g.index:
            continue
        ref = float(g.loc["dense", "graph_ms"])
        for off, method in ((-0.2, "dense"), (0.2, "fst")):
            if method not in g.index:
                continue
            bottom = 0.0
            for part in parts:
                h = float(g.loc[method, part]) / ref
                label = None if part in labelled else part
                labelled.add(part)
                ax.bar(i + off, h, width=0.36, bottom=bottom, color=colors[part], label=label)
                bottom += h
            replay = float(g.loc[method, "graph_ms"]) / ref
            tick = None if "replay" in labelled else "graph replay time"
            labelled.add("replay")
            ax.hlines(replay, i + off - 0.18, i + off + 0.18, color="black", lw=1.5, label=tick)
            ax.text(i + off, max(bottom, replay) + 0.01, method[0].upper(), ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(shapes)), list(labels))
    ax.set_xlabel(f"{xlabel} (D = dense, F = fst)")
    ax.set_ylabel("share of dense replay time")
    ax.set_title(title)
    if legend == "right":
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    else:
        ax.legend(fontsize=5, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
