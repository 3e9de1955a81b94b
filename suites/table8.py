"""Hu et al. 2024, Table 8: end-to-end pre-training step speedup of GPT-2 124M, 350M and 774M with
2:4 fully sparse training (``fst``) vs dense, at the paper's batch sizes (16, 16, 5; sequence 1024)
and the largest that fits (60, 35, 23 on an 80 GB H100), with ``weight24``, ``srste`` and the
iso-FLOP ``half`` baseline alongside.

One training step = forward, loss, backward, gradient clipping, AdamW (bf16 autocast, float32
master weights; ``repro.train.step.train_step``, the pretraining runs' step), captured whole in a
CUDA graph and replayed (the dense baseline the same way).
Sparse modes also pay for their mask refreshes: the transposable masks of every FFN linear are
recomputed every ``mask_interval`` (40) steps outside the graph; that time, divided by 40, is added
to the step (``step_time_amortized``, the basis of the speedup). Before timing, each model's loss
and its sparse layers' weight gradients are checked against a float32 dense twin with the same
masks; after timing, the timed step's own loss (``CHECKS``). Beside the speedup: its
GEMM-level ceiling, the step of the model whose FFN linears are ``Gemm24Only`` (fst's 2:4 GEMMs in
place; packing, MVUE, masked decay and mask refreshes removed; attention, LM head, norms and
optimizer unchanged): the most fst can reach here.

Two builds of the same model can time differently, so the full profile builds and times every
mode in 3 rounds and reports medians (speedup = ratio of the medians) with the per-round range.
In the first round the dense and the fst step are also profiled kernel by kernel (one replay of
the timed graph after warm-up, ``suites._kernel_breakdown``): GEMMs, attention, activation, fst's packs and decay,
norms, loss, optimizer, the rest, beside the replay time: where a step's time goes.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from kernels.ops.transposable import is_transposable_24, transposable_mask
from repro.checks import rel_err
from repro.models.gpt2 import CONFIGS, GPT2Config, build_gpt2
from repro.paper import load_paper
from repro.plots import grouped_bars, new_figure, save
from repro.suite import RunContext
from repro.timing import release_memory
from repro.train.step import lm_loss, train_step
from suites import _kernel_breakdown as kernel_breakdown_rows
from suites._common import Verdict, precision_caveat, ratio_verdict, worst
from suites._training_bench import (
    BEST_DENSE,
    CEILING,
    DW_TOL,
    FST_ALL,
    MVUE_DRAWS,
    amp_dtype,
    amp_name,
    attn_factory,
    best_dense_summary,
    ceiling_refusal,
    compile_in_place,
    compile_label,
    compiled_name,
    compiled_runs_enabled,
    factory,
    masked_dense_twin,
    mode_config,
    range_label,
    round_summary,
    sparse_layers,
    split_run,
    timers_by_run,
)

NAME = "table8"
PAPER = "hu2024"
ARTIFACT = "table8"
TITLE = "Hu et al. 2024 Table 8: GPT-2 end-to-end training-step speedup (2:4 fst vs dense)"
CHECKS = (
    "every model's loss (first 4 sequences of the batch) vs its float32 twin (sparse FFN weights "
    "times their masks) within 2e-2",
    "sparse layers' weight gradients vs the twin's on one sequence: mean of 32 calls within 0.35 "
    "for fst (MVUE), one call within 3e-2 for weight24 and srste",
    "timed step: its own loss (poisoned, recomputed by the replay) finite and not above the first",
    "mask refresh: the refreshed masks equal the exhaustive transposable masks of the weights (where "
    "they differ, transposable and within 4e-7 of the optimal kept sum of |w| per tile: the float32 search's bound)",
)

# the paper's batch, and the largest batch whose step fits on an 80 GB H100 for every mode the way
# this suite runs it (check, eager step, graph capture, a profiled replay): found by
# scripts/probes/gpu_probe_max_batch.py (results/tuning/h100_probe_max_batch.txt); on a GPU with
# less memory a mode that does not fit is left out of that row, and logged
FULL = {"gpt2-124m": (16, 60), "gpt2-350m": (16, 35), "gpt2-774m": (5, 23)}
SMOKE_CFG = GPT2Config(d_model=64, n_layer=2, n_head=4, vocab_size=256, seq_len=32)
SMOKE = {"smoke-tiny": (2,)}
MODES = ("fst", "weight24", "srste", "half")
"""The paper's sparse modes and its iso-FLOP baseline, eager (as the paper times them)."""
EXTRA = (FST_ALL,)
"""Beyond the paper: fst in the attention projections too (labelled so wherever it appears)."""
COMPILED_OF = ("dense", "fst", FST_ALL)
"""Runs also timed ``torch.compile``d (``REPRO_COMPILED=0``: none): the strongest dense step, and
fst against it."""
ROUNDS = {"full": 3, "smoke": 1}  # fresh builds per model and mode: medians and ranges are reported
SEQ = 1024
LOSS_TOL = 2e-2
CHECK_SEQS = 4  # sequences of the batch on which each model's loss is checked against its twin
# runs whose step is also profiled kernel by kernel (first round)
PROFILED = ("dense", "fst", "dense_compiled", "fst_compiled", f"{FST_ALL}_compiled")  # fst_all: its 1.10x target


def _config(name: str, profile: str) -> GPT2Config:
    return CONFIGS[name] if profile == "full" else SMOKE_CFG


class _Step:
    """A whole training step on static tensors; ``__call__`` is what the graph captures."""

    def __init__(self, model: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor, cuda: bool) -> None:
        self.model, self.tokens, self.targets, self.cuda = model, tokens, targets, cuda
        params = [p for p in model.parameters() if p.requires_grad]
        kw = {"fused": True, "capturable": True} if cuda else {}
        self.params = params
        self.opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95), **kw)

    def loss(self) -> torch.Tensor:
        with torch.autocast(self.tokens.device.type, dtype=amp_dtype(), enabled=self.cuda, cache_enabled=False):
            return lm_loss(self.model, self.tokens, self.targets)

    def __call__(self) -> torch.Tensor:
        # the pretraining loop's step (repro.train.step): forward, loss, backward, clip, AdamW, zero_grad
        out = train_step(
            self.model,
            self.opt,
            self.tokens,
            self.targets,
            grad_clip=1.0,
            amp_dtype=amp_dtype() if self.cuda else None,
            set_to_none=False,  # a captured graph keeps the gradient buffers
            foreach=self.cuda,
        )
        return out.loss  # the step's loss, so the timed call's own output can be checked


def _model(cfg: GPT2Config, run: str, device: torch.device) -> torch.nn.Module:
    """The model of ``run`` (a mode, or a mode's compiled run: compiled in place, lazily at its
    first call), initialised on ``device`` itself (a 774M model takes seconds on the host)."""
    mode, compiled = split_run(run)
    torch.manual_seed(0)
    with torch.device(device):
        model = build_gpt2(mode_config(cfg, mode), linear_factory=factory(mode), attn_linear_factory=attn_factory(mode))
    if compiled:
        compile_in_place(model, device)
    return model


def _check_model(
    ctx: RunContext, model: torch.nn.Module, cfg: GPT2Config, mode: str, tokens, targets, label: str
) -> tuple[float, float]:
    """Loss of the model on the first :data:`CHECK_SEQS` sequences of the batch vs a float32 dense
    twin whose FFN weights carry the same masks (a plain float32 copy for dense and half), and its
    sparse layers' weight gradients vs the twin's on the first sequence (mean of
    :data:`MVUE_DRAWS` calls for fst, whose dW is an MVUE estimate): (loss rel. error, largest dW
    rel. error or NaN). Stops the run on failure. A slice of the batch, not all of it: the same
    weights, masks and code, and the twin's float32 activations of a whole batch of 23 GPT-2 774M
    sequences beside the model's would not fit where the step itself just fits."""
    tokens, targets = tokens[:CHECK_SEQS], targets[:CHECK_SEQS]  # the check's memory stays small
    base = split_run(mode)[0]
    twin = masked_dense_twin(model, partial(_model, cfg, "half" if base == "half" else "dense", tokens.device))
    with torch.no_grad():
        # no weight-cast cache, as in the step: a compiled model is not traced again for it
        with torch.autocast(tokens.device.type, dtype=amp_dtype(), enabled=tokens.is_cuda, cache_enabled=False):
            got = F.cross_entropy(model(tokens).float().flatten(0, 1), targets.flatten())
        ref = F.cross_entropy(twin(tokens).float().flatten(0, 1), targets.flatten())
    err = rel_err(got.reshape(1), ref.reshape(1))
    ctx.check(err <= LOSS_TOL, f"{label} {mode}: loss {got.item():.4f} vs masked dense twin {ref.item():.4f}")
    layers = {name: m for name, m in model.named_modules() if m in set(sparse_layers(model))}
    if not layers:
        return err, float("nan")
    t1, y1 = tokens[:1], targets[:1]
    twin_mods = dict(twin.named_modules())
    for p in twin.parameters():  # the twin's gradients of the sparse layers' weights only
        p.requires_grad_(False)
    for name in layers:
        twin_mods[name].weight.requires_grad_(True)
    F.cross_entropy(twin(t1).float().flatten(0, 1), y1.flatten()).backward()
    mvue = base in ("fst", FST_ALL)
    draws = MVUE_DRAWS if mvue else 1
    for p in model.parameters():
        p.grad = None
    for _ in range(draws):
        with torch.autocast(tokens.device.type, dtype=amp_dtype(), enabled=tokens.is_cuda, cache_enabled=False):
            logits = model(t1)
        F.cross_entropy(logits.float().flatten(0, 1), y1.flatten()).backward()
    e_dw = max(rel_err(m.weight.grad / draws, twin_mods[name].weight.grad) for name, m in layers.items())
    for p in model.parameters():
        p.grad = None
    del twin
    tol = DW_TOL["mvue" if mvue else "exact"]
    ctx.check(e_dw <= tol, f"{label} {mode}: weight gradient rel. error {e_dw:.3f} vs twin (tolerance {tol})")
    return err, e_dw


def _profile_step(ctx: RunContext, call: Callable[[], object], shape: str, mode: str) -> dict[str, float] | None:
    """Kernel time by category of one call of ``call``, the timed step (its graph's replay;
    ``suites._kernel_breakdown``); None, logged, where that runs out of memory (the timing goes
    on without it)."""
    cats = None
    try:
        cats = kernel_breakdown_rows.profile(call, ctx.device)
    except torch.cuda.OutOfMemoryError:
        ctx.log(f"{shape} {mode}: out of GPU memory in the kernel profile, no breakdown")
    release_memory(ctx.device)  # after the handled error: its traceback no longer holds memory
    if cats is None:
        return None
    parts = ", ".join(f"{c} {ms:.1f}" for c, ms in cats.items() if ms >= 0.05)
    ctx.log(f"   kernels {shape} {mode}: {parts}; sum {sum(cats.values()):.1f} ms")
    return cats


# a transposable mask from the float32 search keeps at least this fraction of the tile's optimal
# sum of |w| (kernels.ops.transposable, module docstring)
_MASK_SUM_TOL = 4e-7


def masks_match(got: torch.Tensor, want: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether the refreshed mask ``got`` is the exhaustive transposable mask ``want`` of ``w``
    (computed with ``check_finite=True``: tiles where float32 rounding could drop an entry are
    rescored in float64): equal, or transposable with every tile where they differ keeping at
    least (1 - 4e-7) of ``want``'s sum of |w| there. The layers refresh with ``checks=False``
    (``check_finite=False``: no rescoring, no host sync), so on such a tile (a nonzero |w| <=
    2**-18 x the tile's max beside a float32 tie) they may keep the other of two patterns whose
    sums differ by less than float32 resolves; the kernel's documented bound, not a wrong mask."""
    if torch.equal(got, want):
        return True
    if got.shape != want.shape or not is_transposable_24(got):
        return False
    r, c = w.shape

    def tile_sums(m: torch.Tensor) -> torch.Tensor:
        return (w.detach().abs().double() * m).reshape(r // 4, 4, c // 4, 4).sum((1, 3))

    return bool((tile_sums(got) >= (1 - _MASK_SUM_TOL) * tile_sums(want)).all())


def _refresh_time(ctx: RunContext, model: torch.nn.Module) -> float:
    """Milliseconds of one mask refresh of every sparse FFN linear (done every mask_interval steps)."""
    layers = [m for m in sparse_layers(model) if m.mode != "srste"]
    if not layers:
        return 0.0
    want = [transposable_mask(m.weight.detach(), method="exhaustive") for m in layers]

    def refresh() -> list[torch.Tensor]:
        for m in layers:
            m.refresh_mask()
        return [m.mask for m in layers]

    def same(got: list[torch.Tensor]) -> bool:
        return all(masks_match(a, b, m.weight) for a, b, m in zip(got, want, layers, strict=True))

    t = ctx.time_checked(refresh, same, "mask refresh", graph=False)
    return t.ms


def _time_mode(
    ctx: RunContext,
    cfg: GPT2Config,
    mode: str,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    shape: str,
    check: bool,
) -> tuple[float, float, int, str, float] | None:
    """Build ``mode``'s model, check its loss (``check``), time its captured step and its mask
    refresh: (step ms, refresh ms, refresh interval, timer, compile seconds or NaN); None if it
    does not fit in memory. A compiled run takes one step before the check and the timing: its
    forward and backward compile there (the wall time of that step is the compile time).
    Whether it fits or not, its memory is given back before the next build (``release_memory``):
    one out-of-memory error must not make every later mode fail."""
    cuda = ctx.device.type == "cuda"

    base, compiled = split_run(mode)

    def build_and_time() -> tuple[float, float, int, str, float]:  # the model and step live in this frame only
        model = _model(cfg, mode, ctx.device)
        step = _Step(model, tokens, targets, cuda)
        t0 = time.perf_counter()
        first = step.loss().item()  # first forward: masks and cuSPARSELt algorithms (and compilation)
        compile_s = float("nan")
        if compiled:
            float(step())  # the backward compiles in the first step
            compile_s = time.perf_counter() - t0
        if check:
            err, e_dw = _check_model(ctx, model, cfg, mode, tokens, targets, shape)
            release_memory(ctx.device)  # the twin's blocks, before the step's largest allocation
            ctx.results.add(mode, shape, amp_name(), "loss_rel_err_vs_masked_dense", err, "", verified=True)
            if e_dw == e_dw:
                draws = f"mean of {MVUE_DRAWS} MVUE draws" if base in ("fst", FST_ALL) else "1 call (exact)"
                ctx.results.add(
                    mode, shape, amp_name(), "dw_rel_err_vs_masked_dense", e_dw, "", verified=True, variant=draws
                )
        # the timed step's own loss (poisoned, recomputed by the replay): finite, and the repeated
        # steps on one batch have not made it worse (their updates ran and did not diverge)
        sane = lambda loss: bool(torch.isfinite(loss)) and float(loss) <= first * 1.05  # noqa: E731
        t, timed = ctx.time_checked_kept(step, sane, f"{shape} {mode} step")
        # the kernels of the call that was timed: a replay of the same graph
        cats = _profile_step(ctx, timed, shape, mode) if check and cuda and mode in PROFILED else None
        del timed  # the graph and its pool
        if cats is not None:
            # a profile of the timed replay: no output of its own is checked (verified=False)
            add = partial(ctx.results.add, shape=shape, dtype=amp_name(), verified=False)
            kernel_breakdown_rows.record(add, mode, cats, t.ms, t.timer)
        refresh = _refresh_time(ctx, model) if base in ("fst", "weight24", FST_ALL) else 0.0
        interval = next((m.mask_interval for m in sparse_layers(model)), 1)
        return t.ms, refresh, interval, t.timer, compile_s

    got = None
    try:
        got = build_and_time()
    except torch.cuda.OutOfMemoryError:
        ctx.log(f"{shape} {mode}: out of GPU memory, skipped")
    release_memory(ctx.device)  # after the except block, where the error's traceback is gone
    return got


def _plan(profile: str) -> dict[str, tuple[int, ...]]:
    """The models and batches of ``profile``; ``REPRO_TABLE8_MODELS`` (comma-separated names) and
    ``REPRO_TABLE8_BATCHES`` (comma-separated batch sizes) keep some of them, so a run can be split
    over calls or GPUs of a time-limited machine (each part writes its own results folder; merge
    them after). GPT-2 774M alone took 27.5 of a lease's 30 minutes on an H100 (campaign 324330c)."""
    plan = FULL if profile == "full" else SMOKE
    only = [m for m in os.environ.get("REPRO_TABLE8_MODELS", "").split(",") if m]
    unknown = sorted(set(only) - set(plan))
    if unknown:
        raise ValueError(f"REPRO_TABLE8_MODELS names {unknown}; this profile has {sorted(plan)}")
    plan = {k: v for k, v in plan.items() if not only or k in only}
    text = os.environ.get("REPRO_TABLE8_BATCHES", "")
    try:
        batches = {int(b) for b in text.split(",") if b.strip()}
    except ValueError:
        raise ValueError(f"REPRO_TABLE8_BATCHES must be comma-separated integers, got {text!r}") from None
    if not batches:
        return plan
    kept = {k: tuple(b for b in v if b in batches) for k, v in plan.items()}
    kept = {k: v for k, v in kept.items() if v}
    if not kept:
        have = sorted({b for v in plan.values() for b in v})
        raise ValueError(f"REPRO_TABLE8_BATCHES {sorted(batches)} keeps nothing; the models chosen have {have}")
    return kept


def run(ctx: RunContext) -> None:
    plan = _plan(ctx.profile)
    rounds = ROUNDS[ctx.profile]
    for name, batches in plan.items():
        cfg = _config(name, ctx.profile)
        seq = SEQ if ctx.profile == "full" else cfg.seq_len
        for batch in batches:
            _measure(ctx, name, cfg, batch, seq, rounds)


def _measure(ctx: RunContext, name: str, cfg: GPT2Config, batch: int, seq: int, rounds: int) -> None:
    """Every mode built, checked (first round) and timed in each of ``rounds`` rounds; rows of the
    medians, the speedups as ratios of medians and, with rounds > 1, the per-round ranges."""
    label = f"{name} N={batch}"
    gen = torch.Generator(device=ctx.device).manual_seed(3)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq), device=ctx.device, generator=gen)
    targets = torch.randint(0, cfg.vocab_size, (batch, seq), device=ctx.device, generator=gen)
    shape = f"{name}/N={batch}/seq={seq}"
    ceil = () if ceiling_refusal(cfg.d_model, cfg.ffn_hidden, batch * seq, ctx.device) else (CEILING,)
    comp = tuple(compiled_name(m) for m in COMPILED_OF) if compiled_runs_enabled() else ()
    runs = ["dense", *MODES, *EXTRA, *comp, *ceil]
    compile_s: dict[str, float] = {}
    step: dict[str, list[float]] = {m: [] for m in runs}
    refresh: dict[str, list[float]] = {m: [] for m in runs}
    amortized: dict[str, list[float]] = {m: [] for m in runs}
    timers: dict[str, list[str]] = {m: [] for m in runs}
    for r in range(rounds):
        for mode in list(runs):
            got = _time_mode(ctx, cfg, mode, tokens, targets, shape, check=r == 0)
            if got is None:  # out of memory: the mode is left out of this shape, and a row says so
                runs.remove(mode)
                ctx.results.add(
                    mode, metric="out_of_memory", value=float(r), unit="round", shape=shape, dtype=amp_name(),
                    verified=False,
                )  # fmt: skip
                continue
            t_step, t_refresh, interval, timer, t_compile = got
            timers[mode].append(timer)
            if t_compile == t_compile:
                compile_s.setdefault(mode, t_compile)  # the first round's: later builds hit the caches
            step[mode].append(t_step)
            refresh[mode].append(t_refresh)
            amortized[mode].append(t_step + t_refresh / interval)
        if "dense" not in runs:
            return
    ms, per_round = round_summary({m: amortized[m] for m in runs})
    dense_compiled = compiled_name("dense")
    with_best = dense_compiled in runs  # else no headline: eager dense alone is not the best dense
    if with_best:
        best_ms, best_round = best_dense_summary({m: amortized[m] for m in runs})
    add = partial(ctx.results.add, shape=shape, dtype=amp_name(), verified=True)
    timer_by_mode, unlike = timers_by_run({m: timers[m] for m in runs}, ctx.log, label)
    for mode in runs:
        timer = timer_by_mode[mode]
        med_step = statistics.median(step[mode])
        add(mode, metric="step_time", value=med_step, unit="ms", timer=timer)
        add(mode, metric="mask_refresh_time", value=statistics.median(refresh[mode]), unit="ms")
        add(mode, metric="step_time_amortized", value=ms[mode], unit="ms", timer=timer)
        if rounds > 1:
            add(mode, metric="step_time_amortized_min", value=min(amortized[mode]), unit="ms", timer=timer)
            add(mode, metric="step_time_amortized_max", value=max(amortized[mode]), unit="ms", timer=timer)
        add(mode, metric="tokens_per_s", value=batch * seq / (ms[mode] * 1e-3), unit="tokens/s", timer=timer)
    for mode, t_compile in compile_s.items():  # wall time of the first step, compilation included
        add(mode, metric="compile_time", value=t_compile, unit="s", verified=False, variant=compile_label(ctx.device))
    speedup_runs = [m for m in runs if m not in ("dense", CEILING, *unlike)]
    with_best = with_best and dense_compiled not in unlike
    for mode in speedup_runs:
        add(mode, metric="speedup_vs_dense", value=ms["dense"] / ms[mode], unit="x", timer=timer_by_mode[mode])
        if with_best:  # the headline: against the faster of the eager and the compiled dense step of this run
            best = best_ms[BEST_DENSE] / best_ms[mode]
            add(mode, metric="speedup_vs_best_dense", value=best, unit="x", timer=timer_by_mode[mode])
        if rounds > 1:
            add(mode, metric="speedup_vs_dense_min", value=min(per_round[mode]), unit="x")
            add(mode, metric="speedup_vs_dense_max", value=max(per_round[mode]), unit="x")
            if with_best:
                add(mode, metric="speedup_vs_best_dense_min", value=min(best_round[mode]), unit="x")
                add(mode, metric="speedup_vs_best_dense_max", value=max(best_round[mode]), unit="x")
    msg = f"{label:>18s}: dense {ms['dense']:.1f} ms/step; " + ", ".join(
        f"{m} {ms['dense'] / ms[m]:.3f}x{range_label(per_round[m])}" for m in speedup_runs
    )
    if with_best:
        msg += f"; vs the best dense step ({best_ms[BEST_DENSE]:.1f} ms): " + ", ".join(
            f"{m} {best_ms[BEST_DENSE] / best_ms[m]:.3f}x" for m in speedup_runs if m != dense_compiled
        )
    if CEILING in runs and CEILING not in unlike:
        add("fst", metric="gemm_ceiling_speedup", value=ms["dense"] / ms[CEILING], unit="x")
        if rounds > 1:
            add("fst", metric="gemm_ceiling_speedup_min", value=min(per_round[CEILING]), unit="x")
            add("fst", metric="gemm_ceiling_speedup_max", value=max(per_round[CEILING]), unit="x")
        msg += f" (GEMM-level ceiling {ms['dense'] / ms[CEILING]:.3f}x{range_label(per_round[CEILING])})"
    ctx.log(msg)


_RANGE_COLUMNS = {
    "speedup_vs_dense_min": "fst_speedup_min",
    "speedup_vs_dense_max": "fst_speedup_max",
    "gemm_ceiling_speedup": "fst_gemm_ceiling",
    "gemm_ceiling_speedup_min": "fst_gemm_ceiling_min",
    "gemm_ceiling_speedup_max": "fst_gemm_ceiling_max",
}


def compare(df: pd.DataFrame) -> pd.DataFrame:
    paper = load_paper(ARTIFACT, PAPER)
    pp = {(r.shape, r.metric): r.value for r in paper.itertuples()}
    s = df[df["metric"] == "speedup_vs_dense"]
    st = df[(df["metric"] == "step_time_amortized") & (df["method"] == "dense")]
    dense_ms = dict(zip(st["shape"], st["value"], strict=False))
    rows = []
    for shape, g in s.groupby("shape", sort=False):
        model, nb, _ = shape.split("/")
        batch = int(nb.split("=")[1])
        row = {"model": model, "batch": batch, "dense_ms": dense_ms.get(shape)}
        for r in g.itertuples():
            row[f"{r.method}_speedup"] = r.value
        at = df[df["shape"] == shape]
        for r in at[at["metric"] == "speedup_vs_best_dense"].itertuples():  # the headline ratios
            row[f"{r.method}_vs_best_dense"] = r.value
        for metric, col in _RANGE_COLUMNS.items():  # a range only where the run had rounds
            v = at[(at["metric"] == metric) & (at["method"] == "fst")]["value"]
            if not v.empty:
                row[col] = float(v.iloc[0])
        if pp.get((model, "batch_size")) == batch:
            row["paper_fst_speedup (RTX 3090)"] = pp.get((model, "speedup"))
        rows.append(row)
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame) -> str:
    t = compare(df)
    if t.empty or "fst_speedup" not in t:
        return "see page"

    def best(r: object, run: str) -> str:
        v = getattr(r, f"{run}_vs_best_dense", float("nan"))
        return f", {run} {v:.2f}x" if pd.notna(v) else ""

    parts = [
        f"{r.model} N={r.batch}: fst {r.fst_speedup:.2f}x"
        + (f" (ceiling {r.fst_gemm_ceiling:.2f}x)" if "fst_gemm_ceiling" in t and pd.notna(r.fst_gemm_ceiling) else "")
        + (
            f"; vs the best dense step{best(r, 'fst')}{best(r, 'fst_compiled')}{best(r, 'fst_all_compiled')}"
            if "fst_compiled_vs_best_dense" in t
            else ""
        )
        for r in t.itertuples()
    ]
    return "; ".join(parts) + " (paper 1.1/1.15/1.2x at N=16/16/5, eager vs eager)"


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    t = compare(df)
    kt = kernel_breakdown_rows.table(df)
    fig, axes = new_figure(ncols=1 + (not kt.empty), width=7.0)
    ax = axes[0]
    labels = [f"{r.model}\nN={r.batch}" for r in t.itertuples()]
    if not kt.empty:  # the second panel: where a step's time goes, dense beside fst
        shapes = [sh for sh in df.loc[df["metric"] == "speedup_vs_dense", "shape"].unique() if sh in set(kt["shape"])]
        names = [f"{sh.split('/')[0].removeprefix('gpt2-')}\n{sh.split('/')[1]}" for sh in shapes]
        title = "training step: where time goes"
        kernel_breakdown_rows.plot(axes[1], kt, shapes, names, "model, batch", title, legend="right")
    series = {m: list(t.get(f"{m}_speedup", pd.Series([float("nan")] * len(t)))) for m in MODES}
    for run in ("fst_compiled", "fst_all_compiled"):  # compiled, against the best dense step
        if f"{run}_vs_best_dense" in t:
            series[f"{run.replace('_', ' ')} vs best dense"] = list(t[f"{run}_vs_best_dense"])
    series["fst GEMM-level ceiling"] = list(t.get("fst_gemm_ceiling", pd.Series([float("nan")] * len(t))))
    series["paper fst (RTX 3090)"] = list(t.get("paper_fst_speedup (RTX 3090)", pd.Series([float("nan")] * len(t))))

    def col(name: str) -> list[float]:
        return list(t.get(name, pd.Series([float("nan")] * len(t))))

    ranges = {  # per-round range of the fresh builds (full profile)
        "fst": (col("fst_speedup_min"), col("fst_speedup_max")),
        "fst GEMM-level ceiling": (col("fst_gemm_ceiling_min"), col("fst_gemm_ceiling_max")),
    }
    grouped_bars(
        ax,
        labels,
        series,
        ranges=ranges,
        hatched={"paper fst (RTX 3090)", "fst GEMM-level ceiling"},
        ylabel="training-step speedup vs dense (x)",
        title="GPT-2 pre-training step, CUDA-graph replay",
    )
    ax.axhline(1.0, color="grey", lw=0.8)
    dev, prof = df["device"].iloc[0], df["profile"].iloc[0]
    fig.suptitle(f"{TITLE}  [{dev}, {prof}]", fontsize=9)
    return save(fig, stem)


def verdict(df: pd.DataFrame) -> Verdict:
    """fst's step speedup at the paper's batch per model vs the paper's (RTX 3090), within 5%; the
    worst model decides."""
    t = compare(df)
    col = "paper_fst_speedup (RTX 3090)"
    if col not in t or "fst_speedup" not in t:
        return Verdict("not comparable", "no row at the paper's batch sizes")
    rows = t[t[col].notna()]
    got = [ratio_verdict(float(a), float(b), 0.05, "") for a, b in zip(rows["fst_speedup"], rows[col], strict=True)]
    if not got:
        return Verdict("not comparable", "no row at the paper's batch sizes")
    parts = [f"{m} N={b}: {g.caveat.split(';')[0]}" for m, b, g in zip(rows["model"], rows["batch"], got, strict=True)]
    ceil = t["fst_gemm_ceiling"].dropna() if "fst_gemm_ceiling" in t else pd.Series(dtype=float)
    ceiling = f"; GEMM-level ceiling {ceil.min():.2f}-{ceil.max():.2f}x" if not ceil.empty else ""
    gpu = df["gpu_name"].iloc[0] if "gpu_name" in df and len(df) else "this GPU"
    why = f"; {gpu} vs RTX 3090, {precision_caveat(df)}{ceiling}"
    return Verdict(worst(got), "; ".join(parts) + why)
