"""Hu et al. 2024, Table 3: GEGLU forward throughput on fp16 column-major inputs of shape
32x512xd (d = width of the GEGLU input; the output has d/2 columns), column-major-aware Triton
kernel (ours) vs the "intuitive" row-wise kernel and torch eager ``gelu(gate) * up``.

Bytes per call: read the input once, write the output once.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from kernels.ops.geglu import geglu, geglu_bytes, geglu_intuitive
from repro.paper import load_paper
from repro.plots import grouped_bars, new_figure, save
from repro.suite import RunContext
from suites._common import Verdict, cell, pivot_metric, ratio_verdict, shape_order

NAME = "table3"
PAPER = "hu2024"
ARTIFACT = "table3"
TITLE = "Hu et al. 2024 Table 3: GEGLU throughput, fp16 column-major input"
CHECKS = (
    "every method's output within 2e-3 relative error of a float64 GEGLU, finite",
    "ours returns a column-major output",
    "timed rows: the timed call's own output (poisoned, recomputed) equals the checked output",
)

FULL_SHAPES = [(32, 512, d) for d in (768, 1024, 1280, 1600, 2048, 4096, 8192)]
SMOKE_SHAPES = [(2, 16, 32), (2, 32, 64), (4, 32, 128)]
APPROXIMATE = "tanh"
METHODS = {
    "intuitive": "row-wise access of the column-major tensor, Triton (paper's baseline)",
    "ours": "column-major-aware Triton kernel",
    "torch_eager": "torch eager gelu(gate, approximate='tanh') * up on the strided views",
}
BASELINE = "intuitive"


def torch_eager(z: torch.Tensor) -> torch.Tensor:
    r = z.shape[-1] // 2
    return torch.nn.functional.gelu(z[:, :r], approximate=APPROXIMATE) * z[:, r:]


def _column_major(p: int, d: int, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(d, p, device=device, dtype=torch.float16, generator=gen).t()


def _fns(z: torch.Tensor) -> dict:
    return {
        "intuitive": lambda: geglu_intuitive(z, approximate=APPROXIMATE, check_finite=False),
        "ours": lambda: geglu(z, approximate=APPROXIMATE, check_finite=False),
        "torch_eager": lambda: torch_eager(z),
    }


def run(ctx: RunContext) -> None:
    shapes = FULL_SHAPES if ctx.profile == "full" else SMOKE_SHAPES
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    for b, s, d in shapes:
        label = f"{b}x{s}x{d}"
        z = _column_major(b * s, d, ctx.device, gen)
        ref = torch_eager(z.double())
        fns = _fns(z)
        for method, fn in fns.items():
            out = fn()
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ctx.check(bool(torch.isfinite(out).all()) and err <= 2e-3, f"{label}: {method} rel err {err:.2e}")
            ctx.results.add(method, label, "fp16", "rel_err_vs_fp64", err, "", verified=True)
        out = fns["ours"]()
        ctx.check(out.stride() == (1, z.shape[0]), f"{label}: ours output is not column-major {out.stride()}")
        nbytes = geglu_bytes(z)
        bw = {}
        for m, fn in fns.items():
            want = fn()  # checked above against float64
            t = ctx.time_checked(fn, lambda out, want=want: torch.equal(out, want), f"{label} {m}")
            bw[m] = ctx.add_bandwidth_rows(m, label, "fp16", nbytes, t, verified=True, paper_unit="TB/s")
        for m in ("ours", "torch_eager"):
            ctx.results.add(m, label, "fp16", "speedup_vs_intuitive", bw[m] / bw[BASELINE], "x", verified=True)
        ctx.results.add(
            "ours", label, "fp16", "speedup_vs_torch_eager", bw["ours"] / bw["torch_eager"], "x", verified=True
        )
        ctx.log(
            f"{label:>12s}: ours {bw['ours']:.0f} GB/s ({100 * bw['ours'] / ctx.ceilings.copy_gbps:.0f}% of copy),"
            f" {bw['ours'] / bw['intuitive']:.1f}x intuitive, {bw['ours'] / bw['torch_eager']:.2f}x torch eager"
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
                "ours_pct_copy": cell(pct, k, "ours"),
                "ours_pct_same_bytes_copy": cell(same, k, "ours"),
                "eager_pct_copy": cell(pct, k, "torch_eager"),
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
    t = t[t["our_ratio"].notna()]
    why = "ratio ours / intuitive; H100 vs RTX 3090; our intuitive kernel may be slower than theirs"
    return ratio_verdict(float(t["our_ratio"].median()), float(t["paper_ratio"].median()), 0.2, why)
