"""Hu et al. 2024, Figure 6: acceleration ratio S = dense time / sparse time of forward + backward
of (a) one GPT-2 FFN (n = 2048 tokens per sequence, d varied, d_ff = 4d) and (b-d) one transformer
block (n = 2048, 1024, 512), against batch size N and embedding size d; plus a per-component
breakdown of the ``fst`` FFN (GEMMs, operand packing, MVUE, activation, masked decay; torch's
``_cslt_compress`` of the same operands beside our packer, for comparison).

Every call is captured in a CUDA graph and its replays timed (the cuSPARSELt host overhead of
0.6-1 ms per call would otherwise hide the device-time gain; the dense baseline is captured the
same way). Before timing, every sparse module's output and input gradient are checked against a
float32 dense twin whose weights are multiplied by the same masks. bf16 throughout.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from repro.models.gpt2 import GPT2Config, block, mlp
from repro.paper import load_paper
from repro.plots import new_figure, save
from repro.suite import RunContext
from suites._training_bench import check_against_twin, factory, fwd_bwd, mode_config

NAME = "figure6"
PAPER = "hu2024"
ARTIFACT = "figure6"
TITLE = "Hu et al. 2024 Fig. 6: 2:4 training speedup of an FFN and a transformer block (fwd+bwd)"

FFN_N = 2048
FULL = {
    "ffn_d": (768, 1024, 1280, 1600, 2048, 4096),
    "ffn_batch": (1, 2, 4, 8),
    "block_n": (2048, 1024, 512),
    "block_d": (768, 1024, 1280, 1600),
    "block_batch": (1, 4, 8),
    "ffn_modes": ("fst", "weight24", "srste", "half"),
    "block_modes": ("fst", "half"),
    "breakdown_batch": 4,
}
SMOKE = {
    "ffn_d": (64,),
    "ffn_batch": (1,),
    "block_n": (32,),
    "block_d": (64,),
    "block_batch": (2,),
    "ffn_modes": ("fst", "weight24", "srste", "half"),
    "block_modes": ("fst", "half"),
    "breakdown_batch": 1,
}
SMOKE_N = 32
TOL = {"out": 2e-2, "dx": 3e-2}  # bf16 module vs float32 masked twin


def _cfg(d: int, n: int) -> GPT2Config:
    return GPT2Config(d_model=d, n_layer=1, n_head=max(1, d // 64), seq_len=n, vocab_size=256)


def _build(kind: str, cfg: GPT2Config, mode: str, device: torch.device) -> torch.nn.Module:
    cfg = mode_config(cfg, mode)
    mod = block(cfg, linear_factory=factory(mode)) if kind == "block" else mlp(cfg, linear_factory=factory(mode))
    return mod.to(device=device, dtype=torch.bfloat16)


def _dense_builder(kind: str, cfg: GPT2Config):
    cfg = dataclasses.replace(cfg, ffn_mode="dense")
    return (lambda: block(cfg)) if kind == "block" else (lambda: mlp(cfg))


def _measure(ctx: RunContext, kind: str, cfg: GPT2Config, batch: int, n: int, modes) -> dict[str, float]:
    """Check, then time, fwd+bwd of the dense module and each mode's; returns ms per mode."""
    gen = torch.Generator(device=ctx.device).manual_seed(1)
    d = cfg.d_model
    x = torch.randn(batch, n, d, device=ctx.device, dtype=torch.bfloat16, generator=gen).requires_grad_(True)
    dy = torch.randn(batch, n, d, device=ctx.device, dtype=torch.bfloat16, generator=gen) * 0.1
    label = f"{kind} d={d} n={n} N={batch}"
    ms = {}
    for mode in ("dense", *modes):
        torch.manual_seed(0)
        mod = _build(kind, cfg, mode, ctx.device)
        if mode in ("fst", "weight24", "srste"):
            e_out, e_dx = check_against_twin(mod, _dense_builder(kind, cfg), x, dy)
            ctx.check(e_out <= TOL["out"] and e_dx <= TOL["dx"], f"{label} {mode}: out {e_out:.2e} dx {e_dx:.2e}")
            shape = f"{kind}/d={d}/n={n}/N={batch}"
            ctx.results.add(mode, shape, "bf16", "out_rel_err_vs_masked_dense", e_out, "", verified=True)
            ctx.results.add(mode, shape, "bf16", "dx_rel_err_vs_masked_dense", e_dx, "", verified=True)
        t = ctx.time(fwd_bwd(mod, x, dy))
        ms[mode] = t.ms
        shape = f"{kind}/d={d}/n={n}/N={batch}"
        ctx.results.add(mode, shape, "bf16", "fwd_bwd_time", t.ms, "ms", verified=True, timer=t.timer)
        del mod
    for mode in modes:
        shape = f"{kind}/d={d}/n={n}/N={batch}"
        ctx.results.add(mode, shape, "bf16", "speedup_vs_dense", ms["dense"] / ms[mode], "x", verified=True)
    ctx.log(f"{label:>28s}: dense {ms['dense']:.3f} ms; " + ", ".join(f"{m} {ms['dense'] / ms[m]:.2f}x" for m in modes))
    return ms


def _breakdown(ctx: RunContext, d: int, batch: int, n: int) -> None:
    """Device time of each part of the fst FFN's fwd+bwd, timed on its own (graph replays)."""
    from kernels.cslt_pack import cslt_pack_mvue_t
    from kernels.masked_decay import masked_decay_nocheck_
    from kernels.mvue import mvue24_nocheck, mvue24_seed_tensor
    from kernels.sparse_gemm import cslt_mm_packed, cslt_refusal, pack_operand, pack_pair_operands

    dev, bf = ctx.device, torch.bfloat16
    t_tok, f = batch * n, 4 * d
    if cslt_refusal(f, d, t_tok, bf, dev) is not None:
        return
    g = torch.Generator(device=dev).manual_seed(2)
    w1 = torch.randn(f, d, device=dev, generator=g)  # float32 master weights, as in training
    w2 = torch.randn(d, f, device=dev, generator=g)
    from kernels.transposable import transposable_mask

    m1, m2 = transposable_mask(w1), transposable_mask(w2)
    x = torch.randn(t_tok, d, device=dev, dtype=bf, generator=g)
    h = torch.randn(t_tok, f, device=dev, dtype=bf, generator=g)
    dy = torch.randn(t_tok, d, device=dev, dtype=bf, generator=g)
    dh = torch.randn(t_tok, f, device=dev, dtype=bf, generator=g)
    seed = mvue24_seed_tensor(dev)
    dyt = mvue24_nocheck(dy.t().contiguous(), seed_tensor=seed)  # [d, T] 2:4 along T
    dht = mvue24_nocheck(dh.t().contiguous(), seed_tensor=seed)
    (q1, q1t), (q2, q2t) = pack_pair_operands(w1, m1, bf), pack_pair_operands(w2, m2, bf)
    qy, qh = pack_operand(dyt), pack_operand(dht)
    gemms = [  # fwd fc, fwd proj, dX proj, dX fc, dW proj, dW fc (operands packed already)
        partial(cslt_mm_packed, q1, (f, d), x.t(), transpose_result=True),
        partial(cslt_mm_packed, q2, (d, f), h.t(), transpose_result=True),
        partial(cslt_mm_packed, q2t, (f, d), dy.t(), transpose_result=True),
        partial(cslt_mm_packed, q1t, (d, f), dh.t(), transpose_result=True),
        partial(cslt_mm_packed, qy, (d, t_tok), h),
        partial(cslt_mm_packed, qh, (f, t_tok), x),
    ]
    w1b, w2b = w1.to(bf), w2.to(bf)
    dense = [
        partial(torch.matmul, x, w1b.t()),
        partial(torch.matmul, h, w2b.t()),
        partial(torch.matmul, dy, w2b),
        partial(torch.matmul, dh, w1b),
        partial(torch.matmul, dy.t(), h),
        partial(torch.matmul, dh.t(), x),
    ]
    p1, p2 = (w1 * m1).to(bf), (w2 * m2).to(bf)
    p1t, p2t = p1.t().contiguous(), p2.t().contiguous()
    gw1, gw2 = torch.zeros_like(w1), torch.zeros_like(w2)
    parts = {
        "sparse_gemms": lambda: [fn() for fn in gemms],
        "pack_weights": lambda: (pack_pair_operands(w1, m1, bf), pack_pair_operands(w2, m2, bf)),
        "mvue_and_pack_grads": lambda: (cslt_pack_mvue_t(dy, seed), cslt_pack_mvue_t(dh, seed)),
        "pack_grads_alone": lambda: (pack_operand(dyt), pack_operand(dht)),
        "torch_cslt_compress_same_operands": lambda: [torch._cslt_compress(a) for a in (p1, p2, p1t, p2t, dyt, dht)],
        "mvue_alone_unfused": lambda: (
            mvue24_nocheck(dy.t().contiguous(), seed_tensor=seed),
            mvue24_nocheck(dh.t().contiguous(), seed_tensor=seed),
        ),
        "activation_fwd_bwd": lambda: (
            torch.nn.functional.gelu(h, approximate="tanh"),
            torch.ops.aten.gelu_backward(dh, h, approximate="tanh"),
        ),
        "masked_decay": lambda: (masked_decay_nocheck_(gw1, w1, m1, 6e-5), masked_decay_nocheck_(gw2, w2, m2, 6e-5)),
        "dense_gemms": lambda: [fn() for fn in dense],
    }
    shape = f"ffn/d={d}/n={n}/N={batch}"
    for part, fn in parts.items():
        t = ctx.time(fn)
        ctx.results.add("fst", shape, "bf16", f"part_{part}", t.ms, "ms", verified=True, timer=t.timer)
        ctx.log(f"   breakdown {shape} {part}: {t.ms:.3f} ms")


def run(ctx: RunContext) -> None:
    p = FULL if ctx.profile == "full" else SMOKE
    ffn_n = FFN_N if ctx.profile == "full" else SMOKE_N
    for d in p["ffn_d"]:
        for batch in p["ffn_batch"]:
            _measure(ctx, "ffn", _cfg(d, ffn_n), batch, ffn_n, p["ffn_modes"])
        if ctx.device.type == "cuda":
            _breakdown(ctx, d, p["breakdown_batch"], ffn_n)
    for n in p["block_n"]:
        for d in p["block_d"]:
            for batch in p["block_batch"]:
                _measure(ctx, "block", _cfg(d, n), batch, n, p["block_modes"])


def _parse(shape: str) -> dict:
    kind, *kv = shape.split("/")
    out = {"kind": kind}
    for item in kv:
        k, v = item.split("=")
        out[k] = int(v)
    return out


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """Speedup vs dense per module, d, n and batch, beside the paper's stated values (text of Sec. 6.2)."""
    paper = load_paper(ARTIFACT, PAPER)
    pv = {r.metric: r.value for r in paper.itertuples()}
    s = df[df["metric"] == "speedup_vs_dense"]
    rows = []
    for (shape, method), v in s.groupby(["shape", "method"])["value"].first().items():
        info = _parse(shape)
        paper_val = pv.get("ffn_speedup_max") if info["kind"] == "ffn" else pv.get("block_speedup_typical")
        rows.append({**info, "method": method, "speedup": v, "paper (RTX 3090)": paper_val})
    if not rows:
        return pd.DataFrame()
    t = pd.DataFrame(rows)
    return t.sort_values(["kind", "method", "n", "d", "N"]).reset_index(drop=True)


def summary(df: pd.DataFrame) -> str:
    t = compare(df)
    if t.empty:
        return "see page"
    parts = []
    for kind, target in (("ffn", "paper up to 1.5x"), ("block", "paper ~1.2x")):
        sub = t[(t["kind"] == kind) & (t["method"] == "fst")]
        if not sub.empty:
            parts.append(f"fst {kind}: {sub['speedup'].min():.2f}-{sub['speedup'].max():.2f}x ({target})")
    return "; ".join(parts) or "see page"


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    t = compare(df)
    panels = [("ffn", None)] + [("block", n) for n in sorted(t.loc[t["kind"] == "block", "n"].unique(), reverse=True)]
    fig, axes = new_figure(ncols=max(1, len(panels)), width=4.0)
    for ax, (kind, n) in zip(axes, panels, strict=False):
        sub = t[(t["kind"] == kind) & (t["method"] == "fst")]
        if n is not None:
            sub = sub[sub["n"] == n]
        for d, g in sub.groupby("d"):
            ax.plot(g["N"], g["speedup"], marker="o", label=f"d={d}")
        ax.axhline(1.0, color="grey", lw=0.8)
        paper = 1.5 if kind == "ffn" else 1.2
        ax.axhline(paper, color="black", ls="--", lw=0.8, label=f"paper ({'max' if kind == 'ffn' else 'typical'})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size N")
        ax.set_ylabel("S = dense / fst (fwd+bwd)")
        ax.set_title(f"FFN, n={FFN_N}" if kind == "ffn" else f"block, n={n}")
        ax.legend(fontsize=6)
    dev, prof = df["device"].iloc[0], df["profile"].iloc[0]
    fig.suptitle(f"{TITLE}  [{dev}, {prof}]", fontsize=9)
    return save(fig, stem)
