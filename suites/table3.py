"""Hu et al. 2024, Table 3: GEGLU forward throughput on fp16 column-major inputs of shape
32x512xd (d = width of the GEGLU input; the output has d/2 columns), column-major-aware Triton
kernel (ours) vs the "intuitive" row-wise kernel and torch eager ``gelu(gate) * up``.

Bytes per call: read the input once, write the output once.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from repro.kbench.core import CheckFailed
from repro.kbench.geglu import APPROXIMATE, FULL_SHAPES, GEGLU, SMOKE_SHAPES, torch_eager  # noqa: F401 (re-exported)
from repro.paper import load_paper
from repro.plots import grouped_bars, new_figure, save
from repro.suite import RunContext, num
from suites._common import Verdict, baseline_bound_verdict, cell, gpu_of, pivot_metric, shape_order

NAME = "table3"
PAPER = "hu2024"
ARTIFACT = "table3"
TITLE = "Hu et al. 2024 Table 3: GEGLU throughput, fp16 column-major input"
CHECKS = (
    "every method's output within 2e-3 relative error of a float64 GEGLU, finite",
    "ours returns a column-major output",
    "timed rows: the timed call's own output (poisoned, recomputed) equals the checked output",
)

# Shapes, inputs, bytes, checks and methods are declared once in repro/kbench/geglu.py (also
# read by tests/benchmarks/test_bench_geglu.py).
METHODS = {name: v.doc for name, v in GEGLU.variants.items()}
BASELINE = GEGLU.baseline.name


def run(ctx: RunContext) -> None:
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    for case in GEGLU.cases(ctx.profile):
        label = case.shape
        inp = GEGLU.inputs(case, ctx.device, gen)  # drawn in sequence from one generator
        fns = {m: v(inp) for m, v in GEGLU.variants.items()}
        for method, fn in fns.items():
            try:
                quality = GEGLU.check(inp, method, fn())
            except CheckFailed as e:
                ctx.check(False, f"{label}: {e}")
            for metric, value in quality.items():
                ctx.results.add(method, label, "fp16", metric, value, "", verified=True)
        nbytes = GEGLU.nbytes(inp)
        bw = {}
        for m, fn in fns.items():
            want = fn()  # checked above against float64
            t = ctx.time_checked(fn, lambda out, want=want: GEGLU.same(out, want), f"{label} {m}")
            bw[m] = ctx.add_bandwidth_rows(m, label, "fp16", nbytes, t, verified=True, paper_unit="TB/s")
        for m in ("ours", "torch_eager", "torch_compiled"):
            ctx.results.add(m, label, "fp16", "speedup_vs_intuitive", bw[m] / bw[BASELINE], "x", verified=True)
        for m in ("torch_eager", "torch_compiled"):
            ctx.results.add("ours", label, "fp16", f"speedup_vs_{m}", bw["ours"] / bw[m], "x", verified=True)
        ctx.log(
            f"{label:>12s}: ours {num(bw['ours'])} GB/s ({num(100 * bw['ours'] / ctx.ceilings.copy_gbps)}% of copy),"
            f" {num(bw['ours'] / bw['intuitive'])}x intuitive, {num(bw['ours'] / bw['torch_eager'])}x torch eager,"
            f" {num(bw['ours'] / bw['torch_compiled'])}x torch compiled"
        )


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """Paper vs ours per shape: throughputs as printed / measured, ratios and rooflines."""
    paper = load_paper(ARTIFACT, PAPER)
    pp = paper.pivot_table(index="shape", columns="method", values="value", aggfunc="first")
    thr = pivot_metric(df, "throughput")
    pct = pivot_metric(df, "pct_of_copy")
    same = pivot_metric(df, "pct_of_same_bytes_copy")
    rows = []
    for shape in shape_order([s for s, _ in thr.index] + list(pp.index)):
        k = (shape, "fp16")
        rows.append(
            {
                "shape": shape,
                "paper_intuitive": cell(pp, shape, "intuitive"),
                "paper_ours": cell(pp, shape, "ours"),
                "paper_ratio": cell(pp, shape, "ours") / cell(pp, shape, "intuitive"),
                "our_intuitive_TBps": cell(thr, k, "intuitive"),
                "our_ours_TBps": cell(thr, k, "ours"),
                "our_ratio": cell(thr, k, "ours") / cell(thr, k, "intuitive"),
                "ours_vs_torch_eager": cell(thr, k, "ours") / cell(thr, k, "torch_eager"),
                # the strongest plain-PyTorch baseline (runs before session 58 have no such rows: NaN)
                "ours_vs_torch_compiled": cell(thr, k, "ours") / cell(thr, k, "torch_compiled"),
                "ours_pct_copy": cell(pct, k, "ours"),
                "ours_pct_same_bytes_copy": cell(same, k, "ours"),
                "eager_pct_copy": cell(pct, k, "torch_eager"),
                "compiled_pct_copy": cell(pct, k, "torch_compiled"),
            }
        )
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    table = compare(df)
    fig, (ax1, ax2) = new_figure(ncols=2, width=5.5)
    table = table[table["our_ratio"].notna()]
    labels = list(table["shape"])
    grouped_bars(
        ax1,
        labels,
        {"paper (RTX 3090)": list(table["paper_ratio"]), "ours": list(table["our_ratio"])},
        hatched={"paper (RTX 3090)"},
        ylabel="ours / intuitive throughput (x)",
        title="Column-major GEGLU vs intuitive kernel",
    )
    pct = pivot_metric(df, "pct_of_copy")
    series = {m: [cell(pct, (s, "fp16"), m) for s in labels] for m in METHODS}
    grouped_bars(ax2, labels, series, ylabel="% of measured copy bandwidth", title="Roofline")
    dev, prof = df["device"].iloc[0], df["profile"].iloc[0]
    fig.suptitle(f"{TITLE}  [{dev}, {prof}]", fontsize=9)
    return save(fig, stem)


def verdict(df: pd.DataFrame) -> Verdict:
    """Ours over the intuitive kernel (median over shapes) vs the paper's ratio (RTX 3090)."""
    t = compare(df)
    t = t[t["our_ratio"].notna() & t["paper_ratio"].notna()]  # both medians over the same shapes
    why = f"ratio ours / intuitive over {len(t)} shapes both measured; {gpu_of(df)} vs RTX 3090"
    if "ours_vs_torch_eager" in t and t["ours_vs_torch_eager"].notna().any():
        why += f"; against eager PyTorch ours is {t['ours_vs_torch_eager'].median():.2f}x (median)"
    if "ours_vs_torch_compiled" in t and t["ours_vs_torch_compiled"].notna().any():
        why += f", against torch.compile {t['ours_vs_torch_compiled'].median():.2f}x"
    else:
        why += ", against torch.compile not measured in this run"
    tbps = t["our_intuitive_TBps"] if "our_intuitive_TBps" in t else pd.Series(dtype=float)
    slow = f"our intuitive kernel at {tbps.min():.3g}-{tbps.max():.3g} TB/s"
    return baseline_bound_verdict(float(t["our_ratio"].median()), float(t["paper_ratio"].median()), 0.2, why, slow)
