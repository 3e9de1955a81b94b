"""GLUE fine-tuning of the pretraining runs, shared by the suites of Hu et al.'s GLUE columns
(``hu_table4``, ``hu_table5_glue``, ``hu_table7_glue``).

Protocol (docs/evaluation.md, "GLUE columns of Hu et al."): every pretraining run's final checkpoint is
fine-tuned with ``repro.eval.glue`` on SST-2, MRPC and RTE by stratified k-fold cross-validation on
their *validation* splits (the only GLUE data available offline), same folds (seed 0) for every run,
so two runs differ only by their checkpoint. Rows per run and task: each fold's metric, the mean over
folds with its standard deviation and a t-interval over folds, the pooled held-out metric; and a
three-task score (mean of SST-2 acc, MRPC mean(acc, F1), RTE acc: GLUE's own per-task averaging)
per fold and over folds. Values are in points (x100) like the paper's. The variant of every GLUE
row says ``kfold-validation k=K``: these are not GLUE scores and the suites never call them so.

Gaps between recipes are paired by fold (fold f holds the same examples for every run), so the
fold-to-fold difficulty cancels; the interval is a t-interval over the paired fold differences. The
folds share training data, so such intervals are optimistic (Bengio & Grandvalet 2004): they say
"the gap is within noise" more reliably than "the gap is real".

The runs come from ``suites/_pretrain.py``; STEP and Bi-Mask (Hu Table 4's baselines) are added to
its plan here (``extend_plan``), so the loss suites' module is not edited.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from repro.suite import RunContext
from suites import _pretrain as P

CHECKS = (
    *P.CHECKS[:2],
    "each fine-tuning starts from the run's final checkpoint (step = the run's steps), a fresh copy per fold",
    "the folds cover every example of the task's validation split once; the same folds for every run",
)
"""The checks behind every GLUE suite's rows (the pretraining runs' own, then the fine-tuning's)."""

TASKS = ("sst2", "mrpc", "rte")
PROTOCOL = "kfold-validation"
UNIT = "points"  # GLUE metric x 100, as the paper prints it
FINETUNE: dict[str, dict[str, Any]] = {
    # full / paper: 5 folds (train on 80% of the validation split), 5 epochs, lr 5e-5, batch 16
    "full": dict(k=5, epochs=5, lr=5e-5, batch_size=16, max_len=128, pooling="last", seed=0),
    "paper": dict(k=5, epochs=5, lr=5e-5, batch_size=16, max_len=128, pooling="last", seed=0),
    # smoke: the tiny byte model (16 positions) on the hand-written fixture sets, 2 folds, 1 epoch
    "smoke": dict(k=2, epochs=1, lr=1e-3, batch_size=4, max_len=16, pooling="last", seed=0),
}
"""Fine-tuning per profile: k folds, and ``repro.eval.glue.FineTuneConfig`` fields. Hu et al. give
no fine-tuning recipe beyond Cramming's/nanoGPT's defaults; these are ours (docs/evaluation.md)."""

# STEP and Bi-Mask at the headline scale (Hu Table 4's baselines); same lambda_W as SR-STE/fst.
RECIPE_RUNS: dict[str, dict] = {
    "124m-step-s0": dict(mode="step", decay=P.PAPER_LAMBDA_124M, decay_on="grad", dense_phase="none", seed=0),
    "124m-bimask-s0": dict(mode="bimask", decay=P.PAPER_LAMBDA_124M, decay_on="grad", dense_phase="none", seed=0),
}
for _rid, _recipe in RECIPE_RUNS.items():
    if _rid not in P.plan():
        P.extend_plan(_rid, P.HEADLINE, _recipe)

# two-sided 95% Student t quantiles by degrees of freedom (no scipy at run time); 1.96 beyond 30
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)  # fmt: skip


def t_interval(values: Sequence[float], bounds: tuple[float, float] = (-100.0, 100.0)) -> tuple[float, float, float]:
    """(mean, low, high) of a 95% t-interval over ``values``, cut to ``bounds`` (a score lies in
    [0, 100], a gap in [-100, 100]: with 2 folds the raw interval can be far wider); NaN bounds with
    fewer than 2 values."""
    x = np.asarray([v for v in values if v == v], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    m = float(x.mean())
    if len(x) < 2:
        return m, math.nan, math.nan
    df = len(x) - 1
    half = (_T975[df - 1] if df <= len(_T975) else 1.96) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, max(bounds[0], m - half), min(bounds[1], m + half)


class ByteTokenizer:
    """The smoke corpus's encoding (``_pretrain.smoke_corpus``): UTF-8 bytes, 0 mapped to 1,
    end-of-text 0, so the ``tiny`` model (256-token vocabulary) reads what it was trained on."""

    eot_token = 0

    def encode_ordinary(self, text: str) -> list[int]:
        return [b or 1 for b in text.encode()]


def check_evalsets(profile: str) -> Path:
    """The folder of the GLUE validation splits for ``profile``, checked before any training starts
    (a missing file would otherwise surface only after the runs)."""
    from repro.eval.evalsets import DEFAULT_OUT, SMOKE_SETS
    from repro.eval.glue import GLUE_TASKS

    folder = Path(SMOKE_SETS if profile == "smoke" else DEFAULT_OUT)
    missing = [t for t in TASKS if not (folder / f"{GLUE_TASKS[t]}.jsonl").is_file()]
    if missing:
        raise SystemExit(
            f"no GLUE validation split for {', '.join(missing)} in {folder}; build the evaluation sets first: "
            "python -m repro data evalsets"
        )
    return folder


CKPT_SUFFIX = "-ckpt"


def pretrained(ctx: RunContext, run_ids: Sequence[str]) -> dict[str, tuple[str, Path]]:
    """Run id -> (id of the run whose checkpoint is fine-tuned, its directory). Finished runs are
    reused (``_pretrain.ensure``); but checkpoints are not committed (GBs), so a run finished on
    another machine has logs and no weights: then the same configuration is trained once more as
    ``<run-id>-ckpt`` beside it (the original's logs, which the loss suites' rows came from, stay
    untouched), and that run is the one fine-tuned and reported (its id is in every row)."""
    out: dict[str, tuple[str, Path]] = {}
    for rid, d in P.ensure(ctx, run_ids).items():
        if (d / "checkpoint.pt").is_file():
            out[rid] = (rid, d)
            continue
        twin = rid + CKPT_SUFFIX
        if twin not in P.plan():
            P.extend_plan(twin, *P.plan()[rid])
        ctx.log(
            f"run {rid} is finished but its checkpoint is not here (not committed): training {twin} for its weights"
        )
        _drop_weightless_twin(ctx, twin)
        out[rid] = (twin, P.ensure(ctx, [twin])[twin])
        ctx.check((out[rid][1] / "checkpoint.pt").is_file(), f"run {twin} left a checkpoint")
    return out


def _drop_weightless_twin(ctx: RunContext, twin: str) -> None:
    """A twin finished on another machine (its logs committed, its weights not) is of no use here:
    remove it so that it trains again (its logs are in git; campaign 4c9f848's hu_table7_glue
    stopped on such a twin)."""
    import shutil

    d = P.run_path(ctx.results.path().parent, ctx.profile, twin)
    if d.is_dir() and P.last_step(d) > 0 and not (d / "checkpoint.pt").is_file():
        ctx.log(f"run {twin} was trained elsewhere (logs, no weights): training it again")
        shutil.rmtree(d)


def load_run_model(run_dir: Path, device: Any) -> Any:
    """The pretrained GPT-2 of ``run_dir`` as its run left it (the last checkpoint: weights and each
    sparse layer's state: masks, dense phase, STEP's switch), in train-ready form on ``device``."""
    import torch

    from repro.train import TrainConfig, load_checkpoint
    from repro.train.parts import build_model

    ck = load_checkpoint(run_dir)
    cfg = TrainConfig.from_dict(ck["config"])
    summary = json.loads((run_dir / "summary.json").read_text())
    if int(ck["step"]) != cfg.steps:
        raise ValueError(
            f"{run_dir}: its checkpoint is at step {ck['step']}, the run has {cfg.steps} steps "
            f"(status {summary.get('status', '?')!r}); fine-tuning needs the finished run"
        )
    model = build_model(cfg, torch.device(device))
    model.load_state_dict(ck["model"])
    for name, state in (ck.get("sparse") or {}).items():
        model.get_submodule(name).load_sparse_state_dict(state)
    return model


def task_score(task: str, metrics: dict[str, float]) -> float:
    """GLUE's per-task score: the mean of the task's metrics (MRPC: acc and F1; SST-2, RTE: acc)."""
    return float(np.mean([metrics[m] for m in ("acc", "f1") if m in metrics]))


def finetune_run(ctx: RunContext, method: str, run_id: str, run_dir: Path) -> dict[str, float]:
    """Fine-tune run ``run_id`` on every task by k-fold cross-validation and add its rows (see the
    module docstring); returns the three-task score per fold (``score_fold<f>``) and its mean."""
    from repro.eval.glue import FineTuneConfig, cross_validate, load_glue_offline

    spec = dict(FINETUNE[ctx.profile])
    k = spec.pop("k")
    ft = FineTuneConfig(**spec)
    folder = check_evalsets(ctx.profile)
    if ctx.profile == "smoke":
        tok = ByteTokenizer()
    else:
        from repro.eval.lm import gpt2_tokenizer

        tok = gpt2_tokenizer()
    model = load_run_model(run_dir, ctx.device)
    cfg = json.loads((run_dir / "config.json").read_text())
    if ft.max_len > int(cfg["seq_len"]):
        raise ValueError(f"fine-tuning max_len {ft.max_len} exceeds the model's {cfg['seq_len']} positions")
    log = json.loads((run_dir / "summary.json").read_text())
    tokens = int(log.get("tokens", 0)) or int(P.read_log(run_dir)["tokens"].iloc[-1])
    shape = f"{cfg['model']}/{tokens}tok"
    dtype = P.dtype_label(ctx)
    per_fold: dict[int, list[float]] = {}
    fold_n: dict[int, int] = {}
    total = 0

    def add(metric: str, value: float, n: int) -> None:
        if math.isfinite(float(value)):
            variant = f"{run_id} {PROTOCOL} k={k} n={n}"
            ctx.results.add(method, shape, dtype, metric, float(value), UNIT, variant=variant, verified=False)

    layers = [m for m in model.modules() if hasattr(m, "is_dense")]
    sparse = sum(not m.is_dense for m in layers)
    ctx.log(f"{run_id}: fine-tuning with {sparse} of {len(layers)} FFN linears 2:4 in the forward (as the run ended)")
    kw = dict(variant=run_id, verified=False)
    ctx.results.add(method, shape, dtype, "ffn_linears_2to4_at_finetune", sparse, "layers", **kw)
    for task in TASKS:
        rows = load_glue_offline(task, folder)
        frame = cross_validate(model, task, rows, tok, ft, k=k, seed=0, device=ctx.device)
        ctx.check(set(frame["protocol"]) == {PROTOCOL}, f"{run_id} {task}: k-fold protocol rows only")
        folds = frame[~frame["fold"].isin(["mean", "pooled"])]
        ctx.check(int(folds.groupby("metric")["n"].sum().iloc[0]) == len(rows), f"{run_id} {task}: folds cover the set")
        n = len(rows)
        total += n
        for metric, part in folds.groupby("metric", sort=False):
            vals = 100 * part["value"].to_numpy(float)
            for f, v in zip(part["fold"], vals, strict=True):
                add(f"{task}_{metric}_fold{f}", v, int(part.loc[part["fold"] == f, "n"].iloc[0]))
            m, lo, hi = t_interval(vals, (0.0, 100.0))
            add(f"{task}_{metric}", m, n)
            add(f"{task}_{metric}_std", float(np.std(vals, ddof=1)), n)
            add(f"{task}_{metric}_ci_low", lo, n)
            add(f"{task}_{metric}_ci_high", hi, n)
        pooled = frame[frame["fold"] == "pooled"]
        for r in pooled.itertuples():
            add(f"{task}_{r.metric}_pooled", 100 * r.value, n)
        for f, part in folds.groupby("fold", sort=False):
            s = task_score(task, dict(zip(part["metric"], 100 * part["value"].astype(float), strict=True)))
            per_fold.setdefault(int(f), []).append(s)
            fold_n[int(f)] = fold_n.get(int(f), 0) + int(part["n"].iloc[0])
            add(f"{task}_score_fold{f}", s, int(part["n"].iloc[0]))
        ctx.log(f"{run_id} {task}: " + ", ".join(f"{r.metric} {100 * r.value:.1f}" for r in pooled.itertuples()))
    out: dict[str, float] = {}
    for f, scores in sorted(per_fold.items()):
        ctx.check(len(scores) == len(TASKS), f"{run_id}: fold {f} scored on every task")
        out[f"score_fold{f}"] = float(np.mean(scores))
        add(f"score_fold{f}", out[f"score_fold{f}"], fold_n[f])
    m, lo, hi = t_interval([out[f"score_fold{f}"] for f in sorted(per_fold)], (0.0, 100.0))
    out["score"] = m
    add("score", m, total)
    add("score_ci_low", lo, total)
    add("score_ci_high", hi, total)
    return out


# ---------------------------------------------------------------------------------------------
# reading the rows back
# ---------------------------------------------------------------------------------------------


def majority_fold_scores(evalsets: Path, k: int = 5, seed: int = 0) -> tuple[float, ...]:
    """Per fold, the three-task score of the constant predictor that answers the training folds'
    majority class (the same ``stratified_folds`` as the fine-tuning, ``glue_metrics``,
    :func:`task_score`): the floor a fine-tuned model must clear before its score says anything."""
    from repro.eval.glue import glue_metrics, load_glue_offline, stratified_folds

    per_fold = np.zeros(k)
    for task in TASKS:
        y = np.asarray([int(ex["label"]) for ex in load_glue_offline(task, evalsets)])
        for f, held in enumerate(stratified_folds(y, k, seed)):
            train = np.setdiff1d(np.arange(len(y)), held)
            guess = np.full(len(held), np.bincount(y[train]).argmax())
            m = glue_metrics(task, y[held], guess)
            per_fold[f] += task_score(task, {name: 100 * v for name, v in m.items()}) / len(TASKS)
    return tuple(round(float(v), 4) for v in per_fold)


MAJORITY_FOLD_SCORES = (59.7182, 59.123, 59.3427, 59.4228, 59.7735)
"""``majority_fold_scores`` of the full profile's folds (k=5, seed 0) on the pinned evaluation sets
(``data/evalsets.expected.json``); tests recompute it where the sets are installed."""


def with_majority(caveat: str, df: pd.DataFrame, methods: Sequence[str] | None = None) -> str:
    """``caveat`` and, where the rows allow, :func:`majority_text` of ``methods`` (default: every
    method with GLUE rows), with what an interval holding 0 means."""
    if methods is None:
        methods = list(dict.fromkeys(glue_rows(df)["method"]))
    text = majority_text(df, methods)
    if not text:
        return caveat
    meaning = "an interval holding 0: not distinguishable from always answering the majority class"
    return f"{caveat}. Scores {text} ({meaning})"


def majority_text(df: pd.DataFrame, methods: Sequence[str]) -> str:
    """Each method's three-task score minus the majority-class predictor's, paired by fold, with
    its 95% t-interval; empty where the rows are not the full profile's 5 folds."""
    parts = []
    for method in methods:
        fs = fold_scores(df, method)
        runs = fs.groupby(level="run").apply(lambda r: set(r.index.get_level_values("fold")))
        if fs.empty or any(f != set(range(len(MAJORITY_FOLD_SCORES))) for f in runs):  # other folds (smoke's k=2)
            continue
        g, lo, hi = t_interval([v - MAJORITY_FOLD_SCORES[f] for (_, f), v in fs.items()])
        parts.append(f"{method} {g:+.1f} [{lo:+.1f}, {hi:+.1f}]")
    if not parts:
        return ""
    base = float(np.mean(MAJORITY_FOLD_SCORES))
    return f"over the majority-class predictor ({base:.1f}, same folds): " + ", ".join(parts)


def glue_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The GLUE rows (k-fold protocol) of these results."""
    return df[df["variant"].astype(str).str.contains(f" {PROTOCOL} ", regex=False)]


def fold_scores(df: pd.DataFrame, method: str, metric: str = "score") -> pd.Series:
    """``metric``'s value per (run, fold) of ``method``: index ``(run_id, fold)``."""
    g = glue_rows(df)
    part = g[(g["method"] == method) & g["metric"].str.fullmatch(rf"{metric}_fold\d+")]
    idx = pd.MultiIndex.from_arrays(
        [part["variant"].str.split(" ").str[0], part["metric"].str.rsplit("fold", n=1).str[1].astype(int)],
        names=["run", "fold"],
    )
    return pd.Series(part["value"].to_numpy(float), index=idx).groupby(level=[0, 1]).last()


def ours(df: pd.DataFrame, method: str, metric: str = "score") -> tuple[float, float, float]:
    """(mean, low, high) of ``metric`` for ``method`` over all its runs' folds (several seeds:
    every (seed, fold) counts once)."""
    return t_interval(fold_scores(df, method, metric).to_list(), (0.0, 100.0))


def seed_of(run_id: str) -> str:
    """The seed part of a run id (``124m-fst-s1-ckpt`` -> ``s1``; ``""`` for a run without one, as
    Hu Table 7's sweep runs): a retrained twin (``-ckpt``) is the same seed."""
    m = re.search(r"-(s\d+)$", re.sub(r"-ckpt$", "", run_id))
    return m.group(1) if m else ""


def paired_gap(df: pd.DataFrame, a: str, b: str, metric: str = "score") -> tuple[float, float, float]:
    """``a`` minus ``b`` of ``metric``, paired by seed and fold (``a``'s seed-s run's fold f with
    ``b``'s): (mean, low, high) of a t-interval over the paired differences; NaN where they do not
    pair (other seeds, other folds, or two runs of one method with the same seed)."""
    sa, sb = fold_scores(df, a, metric), fold_scores(df, b, metric)
    if sa.empty or sb.empty:
        return math.nan, math.nan, math.nan
    by_seed = []
    for s in (sa, sb):
        runs = s.index.get_level_values(0).unique()
        seeds = {seed_of(r): r for r in runs}
        if len(seeds) != len(runs):
            return math.nan, math.nan, math.nan
        by_seed.append(seeds)
    if set(by_seed[0]) != set(by_seed[1]):
        return math.nan, math.nan, math.nan
    diffs = []
    for seed in sorted(by_seed[0]):
        fa, fb = sa.loc[by_seed[0][seed]], sb.loc[by_seed[1][seed]]
        if set(fa.index) != set(fb.index):
            return math.nan, math.nan, math.nan
        diffs += list(fa - fb.loc[fa.index])
    return t_interval(diffs)


def paper_task_score(paper: pd.DataFrame, method: str, task: str) -> float:
    """The paper's value of one of our three tasks, in the same per-task averaging as ours (MRPC:
    the mean of its unlabeled printed pair, which is acc and F1 in some order)."""
    p = paper[paper["method"] == method].set_index("metric")["value"]
    if task == "mrpc":
        pair = [p.get("glue_mrpc_first", math.nan), p.get("glue_mrpc_second", math.nan)]
        return float(np.mean(pair))
    return float(p.get(f"glue_{task}", math.nan))


def paper_score(paper: pd.DataFrame, method: str) -> float:
    """The paper's mean over SST-2, MRPC and RTE (our three tasks), per-task averaged as ours."""
    return float(np.mean([paper_task_score(paper, method, t) for t in TASKS]))


def claim_state(low: float, high: float, *, above: float | None = None, within: float | None = None) -> str:
    """Whether an interval [low, high] says a claim holds: ``above`` (gap > above), ``within``
    (|gap| <= within). "holds", "fails" (the interval says the opposite), else "undetermined"."""
    if not (low == low and high == high):
        return "not measured"
    if above is not None:
        return "holds" if low > above else ("fails" if high < above else "undetermined")
    assert within is not None
    if -within <= low and high <= within:
        return "holds"
    return "fails" if high < -within or low > within else "undetermined"


def scale_note(df: pd.DataFrame) -> str:
    """The pretraining scale and the fine-tuning protocol behind these rows."""
    g = glue_rows(df)
    ks = sorted({v.split(" k=")[1].split(" ")[0] for v in g["variant"]}) if len(g) else []
    return f"{P.scale_note(df)}; {PROTOCOL} k={'/'.join(ks) or '?'} on SST-2/MRPC/RTE validation splits"


def method_table(df: pd.DataFrame, methods: dict[str, str | None], paper: pd.DataFrame) -> pd.DataFrame:
    """Paper vs ours per method and task (``sst2``, ``mrpc``, ``rte`` task scores and the
    three-task ``score``): the paper's value (GLUE, its standard splits; NaN where it has no such
    row) and minus its dense row, ours (k-fold mean) with its fold t-interval, ours minus our dense
    model paired by fold with its interval. ``methods``: our method -> the paper's method name."""
    rows = []
    for method, pm in methods.items():
        for task in (*TASKS, "score"):
            metric = "score" if task == "score" else f"{task}_score"
            if pm is None:
                pv = pdense = math.nan
            elif task == "score":
                pv, pdense = paper_score(paper, pm), paper_score(paper, "dense")
            else:
                pv, pdense = paper_task_score(paper, pm, task), paper_task_score(paper, "dense", task)
            m, lo, hi = ours(df, method, metric)
            g, glo, ghi = paired_gap(df, method, "dense", metric) if method != "dense" else (0.0, 0.0, 0.0)
            rows.append(
                {
                    "method": method,
                    "task": task,
                    "paper_glue": pv,
                    "paper_minus_dense": pv - pdense,
                    "ours_kfold": m,
                    "ours_ci_low": lo,
                    "ours_ci_high": hi,
                    "ours_minus_dense": g,
                    "gap_ci_low": glo,
                    "gap_ci_high": ghi,
                }
            )
    return pd.DataFrame(rows)


def method_table_with_glue_score(df: pd.DataFrame, methods: dict[str, str | None], paper: pd.DataFrame) -> pd.DataFrame:
    """``method_table`` plus, on each method's ``score`` row, the paper's GLUE score over all its
    tasks (``paper_glue_all_tasks``; NaN on the per-task rows and where the paper has none)."""
    t = method_table(df, methods, paper)
    full = paper[paper["metric"] == "glue_score"].set_index("method")["value"]
    t["paper_glue_all_tasks"] = [
        full.get(methods[m] or "", np.nan) if task == "score" else np.nan
        for m, task in zip(t["method"], t["task"], strict=True)
    ]
    return t


def gap_text(df: pd.DataFrame, a: str, b: str, label: str, **claim: float) -> tuple[str, str]:
    """("fst-dense +0.3 [-1.2, +1.8]", claim state) for the paired three-task score gap a - b."""
    g, lo, hi = paired_gap(df, a, b)
    return f"{label} {g:+.1f} [{lo:+.1f}, {hi:+.1f}]", claim_state(lo, hi, **claim)
