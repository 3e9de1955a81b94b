"""FAST Fig. 3, end to end: a tensor-parallel training step of a Llama model with flex-SS masks
regenerated on each rank's shard, FAST vs the PyTorch implementation and the Vegeta-based method
(and SR-STE 2:4, and dense), the step split into forward+backward, mask generation, pivot search
(with its communication) and optimizer (``repro.tp_step``). FAST runs twice: ``fast`` with the
paper's distribution-aware pivot search (``kernels.ops.pivot`` gaussian, rounds decided on the
host: 51-70 ms per regeneration at 460M and 206-209 ms at 7B-cut7 on one H100 in campaign
be79020, against 15 and 86 ms for the baselines' gathered top-k; on two GPUs 45-49 and 169-173 ms
against 17 and 148 ms: FAST's pivot scales with the GPUs, the gathered top-k does not, but at two
it is still the slower), and ``fast_radix`` with
the same masks from an exact device radix select whose digit histograms are all-reduced
(``kernels.ops.pivot_radix``: no weights gathered, no host round trip), so the table shows what
the pivot search costs FAST. The headline ratios are ``fast``'s.

Runs in one process (world 1) or under ``torchrun`` (world = the launch's, TP over all ranks):
``torchrun --nproc-per-node N -m repro run fast_figure3_e2e --profile full`` (rank 0 writes the
results). Profiles:

- smoke: CPU, gloo, a tiny Llama (hidden 128 x world, FFN 256 x world, 2 layers: every rank's pieces
  keep the size of world 1's and Vegeta(8)'s 128-wide tiles), refresh every step, 2 timed steps.
- full: MAP-NEO 460M, and MAP-NEO 7B cut to as many layers as fit one GPU's memory at this world
  size (``layers_that_fit``; per-layer costs scale, the cut is in the row's model name), refresh
  every 1 and every 10 steps (the paper does not state its interval). ``FAST_E2E_MODELS`` (comma
  list of "map-neo-460m", "map-neo-7b") and ``FAST_E2E_EVERY`` (comma list of ints) narrow a run
  (a device call has 10 minutes).

On a GPU every block is ``torch.compile``d (fullgraph) after the TP plan, as torchtitan composes
them (``parallelize_llama(compile_blocks=True)``): the forward+backward every method shares is then
the fastest a PyTorch user runs, and not bound by eager DTensor dispatch (world 4 eager: 296 ms vs
113 ms at world 1 for 460M, campaign 324330c). ``FAST_E2E_COMPILE=0`` runs the blocks eager; the
``compiled_blocks`` setup row says which. The baselines' mask functions are ``torch.compile``d on
a GPU for every pattern, as in figure3 (TBS(8) since fca38da, one graph for every shard shape:
before, its baselines ran eager, about 3-7x slower than compiled on an H200:
``results/tuning/h200_probe_compiled_baselines.txt``).

Correctness first: before any timing, every method's masks (made on the shards with that
method's distributed pivot) are checked against the readable reference of the same global weights
(``repro.tp_step.check_masks``): the pivot is the exact k-th largest |w| over all ranks (counts
all-reduced), the tie share the exact one, and every rank's masks equal the reference's with that
pivot (fused Triton / compiled forms: the tolerance of ``suites/figure3.py``). The CPU tests hold
this check to ``gather_check_masks``, which gathers every piece on rank 0 (too slow and large at
7B: 100 s per method at world 4).
Step-time rows carry verified=False (a step time: only the loss is checked, finite).

The paper's 10.40x / 1.56x are MAP-NEO 7B on 8 A800s under model parallelism: rows from another
world size or model say "not comparable" and why.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from functools import partial
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from repro.models.llama import CONFIGS, LlamaConfig, LlamaModel, block_linear_shapes
from repro.paper import load_paper
from repro.suite import RunContext
from repro.tp_step import (
    PARTS,
    TPTrainer,
    build_mesh,
    check_masks,
    dist_env,
    init_distributed,
    parallelize_llama,
)
from suites._common import Verdict

NAME = "fast_figure3_e2e"
PAPER = "fast"
ARTIFACT = "figure3_e2e"
PAPER_ARTIFACT = "figure3"  # the paper's rows (repro/paper_data/fast_figure3.csv, metrics e2e_*)
DISTRIBUTED = True  # the workflow launches it under torchrun at --config world=N (workflow/rules/common.smk)
TITLE = "FAST Fig. 3 end to end: tensor-parallel training step, FAST vs PyTorch / Vegeta-based / SR-STE"
CHECKS = (
    "every method's pivot over the group is the exact k-th largest |w| of the global weights "
    "(#above < k <= #above + #at, counts all-reduced) and its tie share the exact one",
    "every shard's mask equals the readable reference's for that shard with that pivot "
    "(fused/compiled: figure3's tolerance)",
    "step-time rows: a finite loss only (verified=False)",
)

DENSITY = 0.5
FLEX_PATTERNS = ("TBS(4)", "TBS(8)", "Vegeta(4)", "Vegeta(8)")  # suites/figure3.py PATTERNS, 2:4 aside
FLEX_METHODS = ("torch", "vegeta", "fast", "fast_radix")
FAST_RADIX = "fast_radix"  # FAST's masks, the device radix pivot (TPTrainer(method="fast", fast_pivot="radix"))
PAPER_WORLD = 8  # one node of 8 A800s (Fig. 3 caption)
PAPER_MODEL = "map-neo-7b"
SMOKE = LlamaConfig(hidden=128, ffn=256, layers=2, heads=4, vocab=256, seq_len=32)  # hidden, FFN x world
FULL_MODELS = ("map-neo-460m", "map-neo-7b")
SEQ = 2048
BATCH = {"map-neo-460m": 4, "map-neo-7b": 1, "smoke": 2}  # sequences per data-parallel rank
MEMORY_FRACTION = 0.8
RESERVE_BYTES = 3 << 30


def cases() -> list[tuple[str, str | None]]:
    """(method, pattern) of every row: dense, SR-STE 2:4, and each flex pattern by each method."""
    return [("dense", None), ("srste", "2:4")] + [(m, p) for p in FLEX_PATTERNS for m in FLEX_METHODS]


def layers_that_fit(cfg: LlamaConfig, mem_bytes: int, world: int, batch: int, seq: int) -> int:
    """Blocks of ``cfg`` a TP rank trains in ``MEMORY_FRACTION`` of ``mem_bytes``. Per local sparse
    weight, 17 B held throughout (fp32 weight, two AdamW moments, the dense copy kept while the
    masked weights run, ``TPTrainer.mask_weights``, the mask), then the larger of two peaks that
    never coexist (``zero_grad(set_to_none=True)`` frees the gradients before a regeneration;
    activations live only in the forward and backward): a regeneration's pivot buffers (the
    baselines' gathered float32 |w|, 4 B x world, and ``torch.topk``'s float32 values and int64
    indices for half of them, 6 B x world; at least 8 B of local |w|), or the forward and
    backward (4 B of gradient, the block's bf16 activations). Fixed: replicated embedding and head
    (16 B each), the logits (fp32 with grad). Campaign 85d52d1 measured the regeneration peak:
    7B-cut17 at world 4 held 43.7 GiB with the gathered |w| live, and the top-k needs 25 GiB more
    (69 GiB, above 80% of an H100's 79 GiB: the formula gives 15 layers there)."""
    sparse = sum(o * i for _, o, i in block_linear_shapes(cfg)) / world
    activations = batch * seq * (16 * cfg.hidden + 4 * cfg.ffn / world) * 2
    peak = max(sparse * max(8, 10 * world), sparse * 4 + activations)
    per_block = sparse * 17 + peak
    fixed = 2 * cfg.vocab * cfg.hidden * 16 + 3 * batch * seq * cfg.vocab * 4 + RESERVE_BYTES
    return max(1, min(cfg.layers, int((MEMORY_FRACTION * mem_bytes - fixed) // per_block)))


def model_label(name: str, layers: int, paper_layers: int, world: int) -> str:
    """``map-neo-7b-cut12of30 w4``: the model, its cut (if any) and the world size, so the rows of
    runs at several world sizes (merged from separate launches) stay apart."""
    cut = "" if layers == paper_layers else f"-cut{layers}of{paper_layers}"
    return f"{name}{cut} w{world}"


def base_model(label: str) -> str:
    """The model name of a row label (``model_label`` without the cut and the world size)."""
    return label.split(" w")[0].split("-cut")[0]


def _models(ctx: RunContext, world: int) -> dict[str, tuple[LlamaConfig, int]]:
    """Model label -> (config, batch per dp rank)."""
    if ctx.profile != "full":
        cfg = dataclasses.replace(SMOKE, hidden=SMOKE.hidden * world, ffn=SMOKE.ffn * world, heads=SMOKE.heads * world)
        return {model_label("smoke", cfg.layers, cfg.layers, world): (cfg, BATCH["smoke"])}
    wanted = [m for m in os.environ.get("FAST_E2E_MODELS", ",".join(FULL_MODELS)).split(",") if m]
    mem = torch.cuda.get_device_properties(ctx.device).total_memory
    out = {}
    for name in wanted:
        if name not in FULL_MODELS:
            raise SystemExit(f"FAST_E2E_MODELS: unknown model {name!r}; known: {', '.join(FULL_MODELS)}")
        cfg = dataclasses.replace(CONFIGS[name], seq_len=SEQ)
        layers = layers_that_fit(cfg, mem, world, BATCH[name], SEQ)
        label = model_label(name, layers, cfg.layers, world)
        out[label] = (dataclasses.replace(cfg, layers=layers), BATCH[name])
    return out


def _intervals(profile: str) -> tuple[int, ...]:
    if profile != "full":
        return (1,)
    return tuple(int(x) for x in os.environ.get("FAST_E2E_EVERY", "1,10").split(",") if x)


def _all_ok(ok: bool, device: torch.device) -> bool:
    """Whether ``ok`` holds on every rank (so all ranks stop together after a failed check)."""
    t = torch.tensor([0 if ok else 1], device=device)
    if dist.get_world_size() > 1:
        dist.all_reduce(t)
    return int(t.item()) == 0


def run(ctx: RunContext) -> None:
    env = dist_env()
    device = ctx.device
    created = init_distributed(device)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)  # ranks (and other jobs) share the host's cores, as torchrun sets it
    try:
        _run(ctx, device, env.world)
    finally:
        torch.set_num_threads(threads)
        if created:
            dist.destroy_process_group()


def _run(ctx: RunContext, device: torch.device, world: int) -> None:
    mesh = build_mesh(device)
    rank = dist.get_rank()
    tp = mesh["tp"].size()
    full = ctx.profile == "full"
    warmup, steps = (2, 10) if full else (2, 2)
    dtype = "bf16-autocast" if device.type == "cuda" else "fp32"
    timer = "cuda-events" if device.type == "cuda" else "cpu-perf_counter"
    compile_blocks = device.type == "cuda" and os.environ.get("FAST_E2E_COMPILE", "1") != "0"
    for label, (cfg, batch) in _models(ctx, world).items():
        ctx.log(
            f"{label}: {cfg.layers} layers, world {world} (tp {tp}), batch {batch}x{cfg.seq_len} per dp rank, "
            f"blocks {'compiled' if compile_blocks else 'eager'}"
        )
        setup = partial(ctx.results.add, "setup", label, dtype, verified=True)
        setup("world_size", world, "count")
        setup("tp_size", tp, "count")
        setup("layers", cfg.layers, "count")
        setup("compiled_blocks", float(compile_blocks), "flag")
        setup("paper_layers", CONFIGS.get(base_model(label), cfg).layers, "count")
        gen = torch.Generator(device="cpu").manual_seed(1)
        dp_rank = mesh.get_local_rank("dp")
        tokens = torch.randint(0, cfg.vocab, (mesh["dp"].size(), batch, cfg.seq_len), generator=gen)[dp_rank]
        tokens = tokens.to(device)
        checked: set[tuple[str, str | None]] = set()
        for every in _intervals(ctx.profile):
            for method, pattern in cases():
                if method == "dense" and every != _intervals(ctx.profile)[0]:
                    continue  # no masks: one row serves every interval
                torch.manual_seed(0)
                model = parallelize_llama(LlamaModel(cfg, device=device), mesh, compile_blocks=compile_blocks)
                compile_ = device.type == "cuda"  # baselines compiled, as figure3's (TBS(8): any shape)
                trainer = TPTrainer(
                    model,
                    mesh,
                    "fast" if method == FAST_RADIX else method,
                    pattern,
                    every,
                    density=DENSITY,
                    compile_baselines=compile_,
                    fast_pivot="radix" if method == FAST_RADIX else "gaussian",
                )
                what = f"{label} {method} {pattern}"
                t0 = time.perf_counter()
                if (method, pattern) not in checked:
                    bad = check_masks(trainer, DENSITY)
                    ctx.check(_all_ok(not bad, device), f"{what}: {'; '.join(bad) or 'failed on another rank'}")
                    checked.add((method, pattern))
                    if method != "dense":
                        ctx.results.add(method, label, dtype, "mask_check", 1.0, "pass", verified=True, variant=pattern)
                t_check = time.perf_counter() - t0
                for _ in range(warmup):
                    trainer.step(tokens)
                t_warm = time.perf_counter() - t0 - t_check
                ctx.log(f"  {what} every {every}: mask check {t_check:.1f} s, warm-up (compile) {t_warm:.1f} s")
                trainer.reset_times()
                losses = [trainer.step(tokens) for _ in range(steps)]
                parts = trainer.times_ms()
                last = float(losses[-1])
                ctx.check(_all_ok(math.isfinite(last), device), f"{what} every {every}: loss {last}")
                variant = f"{pattern or 'dense'} every={every}" if method != "dense" else "dense"
                add = partial(ctx.results.add, method, label, dtype, verified=False, variant=variant, timer=timer)
                for part in (*PARTS, "step"):
                    add(f"{part}_ms", parts[part], "ms")
                if rank == 0:
                    ctx.log(
                        f"  {method:>6s} {pattern or '':>9s} every {every:2d}: step {parts['step']:.1f} ms "
                        + " ".join(f"{p} {parts[p]:.1f}" for p in PARTS)
                    )
                del trainer, model
                if device.type == "cuda":
                    torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- paper vs ours


def _setup(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    s = df[df["method"] == "setup"]
    return {m: part.set_index("metric")["value"].to_dict() for m, part in s.groupby("shape", sort=False)}


def not_comparable_reason(model: str, setup: dict[str, float]) -> str:
    """Why a model's rows cannot be set against the paper's 10.40x / 1.56x ('' where they can)."""
    why = []
    if not model.startswith(PAPER_MODEL):
        why.append(f"model {model} (paper: MAP-NEO 7B)")
    elif setup.get("layers") != setup.get("paper_layers"):
        why.append(f"7B cut to {setup.get('layers'):.0f} of {setup.get('paper_layers'):.0f} layers")
    if setup.get("world_size") != PAPER_WORLD:
        why.append(f"world size {setup.get('world_size', float('nan')):.0f} (paper: {PAPER_WORLD} A800s under MP)")
    return "; ".join(why)


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """Per model, interval and pattern: step time of each method, FAST's parts, FAST's speedups
    over the PyTorch implementation, the Vegeta-based method, SR-STE 2:4 and dense; the means over
    patterns; the paper's 10.40x / 1.56x beside them with whether they are comparable and why."""
    paper = load_paper(PAPER_ARTIFACT, PAPER)
    pp = paper[paper["shape"] == PAPER_MODEL].set_index("metric")["value"]
    setups = _setup(df)
    step = df[df["metric"] == "step_ms"]
    rows = []
    for model, part in step.groupby("shape", sort=False):
        dense = part[part["method"] == "dense"]["value"]
        dense_ms = float(dense.iloc[0]) if len(dense) else float("nan")
        reason = not_comparable_reason(model, setups.get(model, {}))
        flex = part[part["method"].isin(FLEX_METHODS)]
        everies = sorted({v.split("every=")[1] for v in part["variant"] if "every=" in v}, key=int)
        for every in everies:
            srste = part[(part["method"] == "srste") & (part["variant"] == f"2:4 every={every}")]["value"]
            srste_ms = float(srste.iloc[0]) if len(srste) else float("nan")
            block = []
            for pattern in FLEX_PATTERNS:
                sel = flex[flex["variant"] == f"{pattern} every={every}"].set_index("method")["value"]
                if "fast" not in sel:
                    continue
                parts = df[
                    (df["shape"] == model) & (df["method"] == "fast") & (df["variant"] == f"{pattern} every={every}")
                ].set_index("metric")["value"]
                r = {
                    "model": model,
                    "every": int(every),
                    "pattern": pattern,
                    "world": setups.get(model, {}).get("world_size"),
                    "fast_ms": sel["fast"],
                    "torch_ms": sel.get("torch"),
                    "vegeta_ms": sel.get("vegeta"),
                    "srste_ms": srste_ms,
                    "dense_ms": dense_ms,
                    **{f"fast_{p}_ms": parts.get(f"{p}_ms") for p in PARTS},
                    "fast_vs_torch": sel.get("torch", float("nan")) / sel["fast"],
                    "fast_vs_vegeta": sel.get("vegeta", float("nan")) / sel["fast"],
                    "fast_vs_srste": srste_ms / sel["fast"],
                    **_radix_columns(df, model, f"{pattern} every={every}", sel),
                }
                block.append(r)
            rows += block
            if block:
                ratios = pd.DataFrame(block)[[c for c in block[0] if c.endswith(AVERAGED)]].astype(float)
                avg, geo = ratios.mean(), ratios.apply(lambda c: c.map(math.log)).mean().map(math.exp)
                rows.append({"model": model, "every": int(every), "pattern": "average (ours)", **avg.to_dict()})
                # the paper's "average" is read as the arithmetic mean, which one slow baseline
                # pattern (TBS(8)) dominates; the geometric mean is each pattern's typical ratio
                rows.append({"model": model, "every": int(every), "pattern": "geometric mean (ours)", **geo.to_dict()})
                rows.append(
                    {
                        "model": model,
                        "every": int(every),
                        "pattern": "paper (MAP-NEO 7B, 8 A800, MP)",
                        "fast_vs_torch": pp.get("e2e_speedup_vs_pytorch"),
                        "fast_vs_vegeta": pp.get("e2e_speedup_vs_vegeta"),
                        "comparable": "yes" if not reason else f"not comparable: {reason}",
                    }
                )
    table = pd.DataFrame(rows)
    scale = scaling(df)
    if len(scale):  # several world sizes: per-block mask and pivot time against world 1's, below
        scale = scale.assign(pattern="scaling: " + scale["method"] + " " + scale["variant"])
        table = pd.concat([table, scale.drop(columns=["method", "variant"])], ignore_index=True)
    return table


AVERAGED = ("_vs_torch", "_vs_vegeta", "_vs_srste")  # the ratio columns averaged over patterns


def _radix_columns(df: pd.DataFrame, model: str, variant: str, sel: pd.Series) -> dict[str, float]:
    """``fast_radix``'s step and pivot time and its ratios to the baselines (empty without its rows,
    e.g. results from before it ran)."""
    if FAST_RADIX not in sel:
        return {}
    ms = float(sel[FAST_RADIX])
    pivot = df[(df["shape"] == model) & (df["method"] == FAST_RADIX) & (df["variant"] == variant)]
    pivot = pivot[pivot["metric"] == "pivot_ms"]["value"]
    return {
        "fast_radix_ms": ms,
        "fast_radix_pivot_ms": float(pivot.iloc[0]) if len(pivot) else float("nan"),
        "fast_radix_vs_torch": sel.get("torch", float("nan")) / ms,
        "fast_radix_vs_vegeta": sel.get("vegeta", float("nan")) / ms,
    }


def scaling(df: pd.DataFrame) -> pd.DataFrame:
    """Per model (cut and world aside), method, pattern and interval: mask generation and pivot
    time per block at each world size, and their speedup over world 1 (per block, since the 7B
    cut keeps more blocks as the world grows), only where both were measured at one commit.
    Empty unless some model ran at several world sizes (runs at different worlds are launched
    apart and their rows merged)."""
    no_pivot = ("srste",)  # SR-STE's fixed 2:4 needs no pivot: no pivot time to scale
    setups = _setup(df)
    timed = df[df["metric"].isin(["mask_ms", "pivot_ms", "step_ms"]) & ~df["method"].isin(["dense", "setup"])]
    rows = []
    for label, part in timed.groupby("shape", sort=False):
        s = setups.get(label, {})
        layers, world = s.get("layers", float("nan")), s.get("world_size", float("nan"))
        for (method, variant), g in part.groupby(["method", "variant"], sort=False):
            v = g.set_index("metric")["value"]
            commit = str(g["git_commit"].iloc[0]) if "git_commit" in g else ""
            rows.append(
                {
                    "model": base_model(label),
                    "method": method,
                    "variant": variant,
                    "world": world,
                    "layers": layers,
                    "commit": commit[:7],
                    **{
                        f"{m.removesuffix('_ms')}_ms_per_block": v.get(m, float("nan")) / layers
                        for m in ("mask_ms", "pivot_ms", "step_ms")
                    },
                }
            )
    t = pd.DataFrame(rows)
    if t.empty or t["world"].nunique() < 2:
        return pd.DataFrame()
    out = []
    for _, g in t.groupby(["model", "method", "variant"], sort=False):
        if g["world"].nunique() < 2:  # e.g. every=10, run at world 1 only: nothing scales
            continue
        one = g[g["world"] == 1]
        for _, r in g.sort_values("world").iterrows():
            r = r.to_dict()
            if r["method"] in no_pivot:  # its pivot part times only the ranks' alignment
                r["pivot_ms_per_block"] = float("nan")
            # a speedup only between rows of one commit: merged runs of other commits may time other
            # code (a pivot made faster in between would read as scaling)
            same = len(one) and str(one["commit"].iloc[0]) == r["commit"]
            for m in ("mask", "pivot"):
                base = float(one[f"{m}_ms_per_block"].iloc[0]) if same else float("nan")
                r[f"{m}_speedup_vs_world1"] = base / r[f"{m}_ms_per_block"] if r[f"{m}_ms_per_block"] else float("nan")
            if len(one) and not same:
                r["comparable"] = f"not comparable: world 1 measured at {one['commit'].iloc[0]}, this at {r['commit']}"
            out.append(r)
    return pd.DataFrame(out)


def scaling_text(df: pd.DataFrame) -> str:
    """Per model run at several world sizes: each method's pivot and mask-generation time per block
    at the largest world against world 1 (median over the patterns of the every-step interval)."""
    t = scaling(df)
    if t.empty:
        return ""
    parts = []
    for model, g in t.groupby("model", sort=False):
        g = g[g["variant"].str.endswith("every=1")]
        top = g["world"].max()
        at = g[g["world"] == top].groupby("method", sort=False)[["pivot_speedup_vs_world1", "mask_speedup_vs_world1"]]
        med = at.median()
        pivot = ", ".join(f"{m} {v:.2f}x" for m, v in med["pivot_speedup_vs_world1"].dropna().items())
        mask = ", ".join(f"{m} {v:.2f}x" for m, v in med["mask_speedup_vs_world1"].dropna().items())
        if not pivot and not mask:
            commits = "/".join(dict.fromkeys(g["commit"]))
            parts.append(f"{model}, 1 -> {top:.0f} GPUs: not comparable (world sizes measured at {commits})")
            continue
        parts.append(f"{model}, 1 -> {top:.0f} GPUs, per block: pivot {pivot}; mask generation {mask}")
    return "; ".join(parts)


def summary(df: pd.DataFrame) -> str:
    """One line: our mean end-to-end speedups (refresh every step) vs the paper's."""
    t = compare(df)
    if t.empty or not {"pattern", "every"} <= set(t.columns):  # no FAST rows yet (a partial merge)
        return "see page"
    avg = t[(t["pattern"] == "average (ours)") & (t["every"] == 1)]
    if avg.empty:
        return "see page"
    r = avg.iloc[-1]
    geo = t[(t["pattern"] == "geometric mean (ours)") & (t["model"] == r["model"]) & (t["every"] == 1)]
    geo_text = (
        f" (geometric means {geo['fast_vs_torch'].iloc[0]:.3g}x / {geo['fast_vs_vegeta'].iloc[0]:.3g}x)"
        if len(geo)
        else ""
    )
    radix = (
        f"; with the device radix pivot {r['fast_radix_vs_torch']:.3g}x / {r['fast_radix_vs_vegeta']:.3g}x"
        if "fast_radix_vs_torch" in r and r["fast_radix_vs_torch"] == r["fast_radix_vs_torch"]
        else ""
    )
    world = _setup(df).get(r["model"], {}).get("world_size", float("nan"))
    gpus = f" on {world:.0f} GPU{'s' if world != 1 else ''}" if world == world else ""
    return (
        f"{r['model']}{gpus}, masks every step: FAST vs PyTorch {r['fast_vs_torch']:.3g}x, vs Vegeta-based "
        f"{r['fast_vs_vegeta']:.3g}x{geo_text}{radix} (paper, 7B on 8 A800s: 10.40x / 1.56x)"
    )


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    """One row per model: per world size and interval, FAST's step-time speedup over each baseline
    per pattern (log), the paper's 10.40x / 1.56x as dashed lines (labelled with whether they are
    comparable); where the model ran at several world sizes, a last panel with each method's pivot
    and mask-generation time per block against the world size (median over the patterns)."""
    from repro.plots import PALETTE, grouped_bars, new_figure, save

    table = compare(df)
    table = table[table["pattern"].isin(FLEX_PATTERNS)] if len(table) else table
    setups = _setup(df)
    scale = scaling(df)
    rows: dict[str, list[tuple[str, int]]] = {}
    if len(table):
        keys = dict.fromkeys(zip(table["model"], table["every"], strict=True))
        order = sorted(keys, key=lambda k: (base_model(k[0]), setups.get(k[0], {}).get("world_size", 0), k[1]))
        for model, every in order:
            rows.setdefault(base_model(model), []).append((model, int(every)))
    scaled = set(scale["model"]) if len(scale) else set()
    ncols = max([len(v) + (m in scaled) for m, v in rows.items()] or [1])
    fig, axes = new_figure(ncols=ncols, width=4.6, nrows=max(1, len(rows)))
    paper = load_paper(PAPER_ARTIFACT, PAPER)
    pp = paper[paper["shape"] == PAPER_MODEL].set_index("metric")["value"]
    for r, (base, panels) in enumerate(rows.items()):
        row_axes = axes[r * ncols : (r + 1) * ncols]
        for ax, (model, every) in zip(row_axes, panels, strict=False):
            sub = table[(table["model"] == model) & (table["every"] == every)]
            series = {
                "vs PyTorch impl.": list(sub["fast_vs_torch"]),
                "vs Vegeta-based": list(sub["fast_vs_vegeta"]),
                "vs SR-STE 2:4": list(sub["fast_vs_srste"]),
            }
            if "fast_radix_vs_torch" in sub and sub["fast_radix_vs_torch"].notna().any():
                series["radix pivot, vs PyTorch impl."] = list(sub["fast_radix_vs_torch"])
            world = setups.get(model, {}).get("world_size", 0)
            grouped_bars(
                ax,
                list(sub["pattern"]),
                series,
                ylabel="FAST training-step speedup (x, log)",
                title=f"{model.split(' w')[0]}, {world:.0f} GPU{'s' if world != 1 else ''}, masks every {every}",
                log=True,
            )
            tag = "" if not not_comparable_reason(model, setups.get(model, {})) else " (not comparable)"
            for i, key in enumerate(("e2e_speedup_vs_pytorch", "e2e_speedup_vs_vegeta")):
                if key in pp:
                    ax.axhline(pp[key], color=PALETTE[i], linestyle="--", linewidth=1, label=f"paper {pp[key]:g}x{tag}")
            ax.axhline(1.0, color="black", linewidth=0.6)
            ax.legend(fontsize=7, loc="upper left")
        used = len(panels)
        if base in scaled:
            _plot_scaling(row_axes[used], scale[scale["model"] == base], base, PALETTE)
            used += 1
        for ax in row_axes[used:]:
            ax.set_visible(False)
    dev, prof = df["device"].iloc[0], df["profile"].iloc[0]
    fig.suptitle(f"{TITLE}  [{dev}, {prof}]", fontsize=9)
    return save(fig, stem)


def _plot_scaling(ax, scale: pd.DataFrame, model: str, palette: list[str]) -> None:
    """Pivot (solid) and mask generation (dashed) time per block against the world size, per
    method, median over the patterns of the interval every=1 (or the smallest run)."""
    every = min(scale["variant"].str.split("every=").str[1].astype(int))
    sub = scale[scale["variant"].str.endswith(f"every={every}")]
    for i, (method, g) in enumerate(sub.groupby("method", sort=False)):
        med = g.groupby("world")[["pivot_ms_per_block", "mask_ms_per_block"]].median()
        color = palette[i % len(palette)]
        if med["pivot_ms_per_block"].notna().any():  # SR-STE's 2:4 needs no pivot (scaling)
            ax.plot(med.index, med["pivot_ms_per_block"], marker="o", color=color, label=f"{method} pivot")
        ax.plot(med.index, med["mask_ms_per_block"], marker="s", linestyle="--", color=color, label=f"{method} mask")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    worlds = sorted(sub["world"].unique())
    commits = sub.groupby("world")["commit"].first() if "commit" in sub else pd.Series(dtype=str)
    mixed = commits.nunique() > 1  # rows of several commits: the lines show code changes too
    ax.set_xticks(worlds)
    ax.set_xticklabels([f"{w:.0f}\n{commits[w]}" if mixed else f"{w:.0f}" for w in worlds])
    ax.set_xlabel("GPUs (tensor parallel)" + (", commit" if mixed else ""))
    ax.set_ylabel("ms per block per step (log)")
    title = f"{model}: scaling, masks every {every} (median over patterns)"
    ax.set_title(title + ("\nworld sizes measured at different commits: not comparable" if mixed else ""))
    ax.legend(fontsize=6, ncol=2, loc="best")


def verdict(df: pd.DataFrame) -> Verdict:
    """Not comparable unless the rows are MAP-NEO 7B, all layers, at world 8 (the paper's setting);
    the means are stated beside the reason."""
    from suites._common import ratio_verdict, worst

    t = compare(df)
    if t.empty or not {"pattern", "every"} <= set(t.columns):
        return Verdict("not comparable", "no end-to-end rows with FAST and its baselines")
    avg = t[(t["pattern"] == "average (ours)") & (t["every"] == t["every"].min())]
    geo = t[(t["pattern"] == "geometric mean (ours)") & (t["every"] == t["every"].min())].set_index("model")
    setups = _setup(df)
    verdicts, notes = [], []
    for _, r in avg.iterrows():
        reason = not_comparable_reason(r["model"], setups.get(r["model"], {}))
        said = f"{r['model']}: ours {r['fast_vs_torch']:.2f}x / {r['fast_vs_vegeta']:.2f}x vs paper 10.40x / 1.56x"
        if r["model"] in geo.index:
            g = geo.loc[r["model"]]
            said += f" (geometric means {g['fast_vs_torch']:.2f}x / {g['fast_vs_vegeta']:.2f}x)"
        if r.get("fast_radix_vs_torch") == r.get("fast_radix_vs_torch") and "fast_radix_vs_torch" in r:
            said += f" (device radix pivot: {r['fast_radix_vs_torch']:.2f}x / {r['fast_radix_vs_vegeta']:.2f}x)"
        if reason:
            verdicts.append(Verdict("not comparable", reason))
            notes.append(f"{said} ({reason})")
        else:
            for ours, paper in ((r["fast_vs_torch"], 10.40), (r["fast_vs_vegeta"], 1.56)):
                verdicts.append(ratio_verdict(ours, paper, 0.15, "A800 vs ours"))
            notes.append(said)
    scale = scaling_text(df)
    if scale:
        notes.append(f"scaling (speedup over 1 GPU): {scale}")
    notes.append(
        "step times are unverified rows: each method's masks are checked in the same run, "
        "the timed steps only for a finite loss"
    )
    return Verdict(worst(verdicts), "; ".join(notes))
