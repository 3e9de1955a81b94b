"""Zero-shot evaluation through lm-eval (``lm_eval.simple_evaluate``) on local copies of the tasks.

``evaluate(model, ["piqa", "arc_easy", "arc_challenge", "lambada_openai", "hellaswag"])`` scores
``model`` (wrapped in ``ReproLM``) on the offline tasks (``repro/eval/tasks/*.yaml``: lm-eval's stock
task definitions with ``dataset_path: json`` and ``data_files`` in ``data/evalsets/``, found
through ``TaskManager(include_path=...)``), with ``HF_DATASETS_OFFLINE=1`` and ``HF_HUB_OFFLINE=1``.
A name that is not one of the offline tasks (or ``stock=True``) goes to lm-eval's own task registry
as is: that needs internet (or a filled Hugging Face cache).

Confidence intervals are ours, not lm-eval's: a seeded percentile bootstrap over the per-example
values lm-eval logs (``log_samples``): correctness (0/1) for ``acc``/``acc_norm``, the per-passage
log-likelihood for LAMBADA's ``perplexity`` (the statistic ``exp(-mean)``, lm-eval's aggregation).
Our point estimate is recomputed from the same samples and checked against lm-eval's aggregate.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd
from torch import nn

from repro.eval.evalsets import DEFAULT_OUT, ZERO_SHOT, read_evalsets_manifest, verify_set

__all__ = [
    "DEFAULT_TASKS",
    "OFFLINE_SUFFIX",
    "TASK_DIR",
    "bootstrap_ci",
    "evaluate",
    "offline_task_name",
    "samples_frame",
    "write_task_configs",
]

TASK_DIR = Path(__file__).parent / "tasks"
OFFLINE_SUFFIX = "_offline"
DEFAULT_TASKS = ("piqa", "arc_easy", "arc_challenge", "lambada_openai", "hellaswag")
PLACEHOLDER = "__EVALSETS__"
# per-sample fields lm-eval logs for each metric, and the statistic over them
_MEAN_METRICS = ("acc", "acc_norm")


def offline_task_name(name: str) -> str | None:
    """``piqa`` / ``piqa_offline`` -> ``piqa_offline``; None where there is no offline copy."""
    base = name[: -len(OFFLINE_SUFFIX)] if name.endswith(OFFLINE_SUFFIX) else name
    return base + OFFLINE_SUFFIX if base in ZERO_SHOT else None


def write_task_configs(evalsets: Path | str, out: Path | str) -> Path:
    """The offline task YAMLs (and their helper modules) in ``out``, pointing at ``evalsets``
    (absolute path); returns ``out`` (pass it as ``TaskManager(include_path=...)``)."""
    evalsets, out = Path(evalsets).resolve(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    quoted = json.dumps(str(evalsets))[1:-1]  # inside a double-quoted YAML string
    for src in sorted(TASK_DIR.iterdir()):
        if src.suffix == ".yaml":
            (out / src.name).write_text(src.read_text().replace(PLACEHOLDER, quoted))
        elif src.suffix == ".py":
            (out / src.name).write_text(src.read_text())
    return out


@contextlib.contextmanager
def hf_offline(enabled: bool = True) -> Iterator[None]:
    """``HF_DATASETS_OFFLINE=1`` and ``HF_HUB_OFFLINE=1`` for the block (and in ``datasets.config``
    / ``huggingface_hub.constants`` where those are already imported), restored afterwards."""
    if not enabled:
        yield
        return
    keys = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    old_env = {k: os.environ.get(k) for k in keys}
    patched: list[tuple[Any, str, Any]] = []
    os.environ.update(dict.fromkeys(keys, "1"))
    import sys

    for mod_name, attrs in (
        ("datasets.config", ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")),
        ("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
    ):
        mod = sys.modules.get(mod_name)
        for a in attrs:
            if mod is not None and hasattr(mod, a):
                patched.append((mod, a, getattr(mod, a)))
                setattr(mod, a, True)
    try:
        yield
    finally:
        for mod, a, v in patched:
            setattr(mod, a, v)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    statistic: str = "mean",
    *,
    iters: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(estimate, low, high): percentile bootstrap of ``statistic`` ("mean" or "perplexity":
    ``exp(-mean)`` of log-likelihoods) over ``values``, ``iters`` resamples with replacement from a
    ``numpy.random.default_rng(seed)``."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("bootstrap_ci needs a non-empty 1-d sequence of values")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if statistic not in ("mean", "perplexity"):
        raise ValueError(f"statistic must be 'mean' or 'perplexity', got {statistic!r}")

    def stat(m: np.ndarray) -> np.ndarray:
        return np.exp(-m) if statistic == "perplexity" else m

    est = float(stat(x.mean()))
    if iters <= 0:
        return est, math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = np.empty(iters)
    for start in range(0, iters, 1000):  # bounded memory: 1000 resamples at a time
        k = min(1000, iters - start)
        means[start : start + k] = x[rng.integers(0, x.size, size=(k, x.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(stat(means), [alpha, 1 - alpha])
    return est, float(lo), float(hi)


def wilson_ci(values: Sequence[float] | np.ndarray, *, confidence: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high): the Wilson score interval of a proportion from 0/1 ``values``. For
    accuracies, where a percentile bootstrap collapses to a zero-width interval at 0 or n correct
    (0 of 1000 gives [0, 0]; Wilson gives [0, 0.0038]) and is too narrow near them."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("wilson_ci needs a non-empty 1-d sequence of values")
    if not np.isin(x, (0.0, 1.0)).all():
        raise ValueError("wilson_ci needs 0/1 values (a proportion)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n, p = x.size, float(x.mean())
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo = 0.0 if p == 0.0 else max(0.0, centre - half)  # exact at the edges (rounding leaves ~1e-19)
    hi = 1.0 if p == 1.0 else min(1.0, centre + half)
    return p, lo, hi


def samples_frame(samples: dict[str, list[dict]]) -> pd.DataFrame:
    """lm-eval's logged samples as one row per (task, document): doc_id and each per-example
    metric value (acc, acc_norm, perplexity = the passage's log-likelihood)."""
    rows = []
    for task, docs in samples.items():
        for s in docs:
            row = {"lm_eval_task": task, "doc_id": s["doc_id"]}
            for m in (*_MEAN_METRICS, "perplexity"):
                if m in s:
                    row[m] = float(s[m])
            rows.append(row)
    return pd.DataFrame(rows)


def _summarise(
    results: dict[str, Any],
    names: dict[str, str],
    *,
    iters: int,
    confidence: float,
    seed: int,
) -> pd.DataFrame:
    per_doc = samples_frame(results.get("samples", {}))
    boot = f"percentile bootstrap over examples, {iters} resamples, seed {seed} (ours)"
    wilson = "Wilson score interval over examples (ours)"
    rows = []
    for task, lm_task in names.items():
        res = results["results"].get(lm_task, {})
        docs = per_doc[per_doc["lm_eval_task"] == lm_task] if not per_doc.empty else per_doc
        before = len(rows)
        for metric in (*_MEAN_METRICS, "perplexity"):
            key = f"{metric},none"
            if key not in res:
                continue
            if metric not in docs or docs[metric].isna().all():  # no samples: no check, no interval
                raise RuntimeError(f"{lm_task} {metric}: lm-eval aggregated it but logged no per-example values")
            vals = docs[metric].dropna().to_numpy()
            if metric == "perplexity":
                method = boot
                est, lo, hi = bootstrap_ci(vals, "perplexity", iters=iters, confidence=confidence, seed=seed)
            else:  # a proportion: acc, acc_norm
                method = wilson
                est, lo, hi = wilson_ci(vals, confidence=confidence)
            theirs = float(res[key])
            if not math.isclose(est, theirs, rel_tol=1e-6, abs_tol=1e-9):
                raise RuntimeError(f"{lm_task} {metric}: lm-eval aggregates {theirs}, its samples give {est}")
            rows.append(
                {
                    "task": task,
                    "metric": metric,
                    "value": est,
                    "ci_low": lo,
                    "ci_high": hi,
                    "confidence": confidence,
                    "n": int(vals.size),
                    "lm_eval_task": lm_task,
                    "ci_method": method,
                }
            )
        if len(rows) == before:  # a task asked for must never vanish from the table
            have = sorted(k.split(",")[0] for k in res if not k.endswith("_stderr,none") and "," in k)
            raise RuntimeError(
                f"lm-eval returned no {'/'.join((*_MEAN_METRICS, 'perplexity'))} for task {task!r} "
                f"(lm-eval task {lm_task!r}; its metrics: {have or 'none'})"
            )
    return pd.DataFrame(rows)


def evaluate(
    model: nn.Module | Any,
    tasks: Sequence[str] = DEFAULT_TASKS,
    limit: int | float | None = None,
    batch_size: int = 32,
    device: str | None = None,
    *,
    tokenizer: Any = None,
    evalsets: Path | str | None = None,
    stock: bool = False,
    num_fewshot: int | None = None,
    bootstrap_iters: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    return_raw: bool = False,
) -> pd.DataFrame | tuple[pd.DataFrame, dict[str, Any]]:
    """Zero-shot scores of ``model`` on ``tasks``: one row per (task, metric) with ``value``,
    ``ci_low``/``ci_high`` (ours: Wilson score intervals for accuracies, a percentile bootstrap for
    perplexity; lm-eval's stderrs are not computed), ``n`` examples, ``ci_method``.

    ``model``: our GPT-2 / Llama module (wrapped in ``ReproLM`` with ``tokenizer``, default GPT-2's
    BPE) or a ready ``lm_eval.api.model.LM``. ``tasks``: offline names (``piqa``, ``arc_easy``,
    ``arc_challenge``, ``lambada_openai``, ``hellaswag``, with or without ``_offline``) or any stock
    lm-eval task name (internet needed); ``stock=True`` sends every name to lm-eval's registry.
    ``limit``: first N (or a fraction of) documents per task, as lm-eval's ``--limit`` (not a score
    to report). ``evalsets``: folder of ``python -m repro data evalsets`` (default data/evalsets).
    ``return_raw``: also return lm-eval's result dict (with its logged samples)."""
    try:
        import lm_eval
        from lm_eval.api.model import LM
        from lm_eval.tasks import TaskManager
    except ImportError:
        from repro.eval.lm import INSTALL_HINT

        raise ImportError(INSTALL_HINT) from None
    from repro.eval.lm import ReproLM

    if isinstance(tasks, str):
        tasks = [tasks]
    if not tasks:
        raise ValueError("no tasks given")
    ok_limit = limit is None or (
        not isinstance(limit, bool)
        and ((isinstance(limit, int) and limit >= 1) or (isinstance(limit, float) and 0.0 < limit < 1.0))
    )
    if not ok_limit:  # lm-eval scanned every document for 0 and failed, and gave islice's error for -3
        want = "None, an int >= 1 (documents) or a float in (0, 1) (a fraction)"
        raise ValueError(f"limit must be {want}, got {limit!r}")
    unknown = [t for t in tasks if not stock and offline_task_name(t) is None]
    if unknown:  # lm-eval would look them up on the hub: a KeyError, or a 30 s timeout offline
        raise ValueError(
            f"no offline copy of task(s) {', '.join(map(repr, unknown))}; offline tasks: {', '.join(ZERO_SHOT)}; "
            "lm-eval's own tasks need stock=True (--stock) and internet"
        )
    names: dict[str, str] = {}
    for t in tasks:
        local = None if stock else offline_task_name(t)
        base = t[: -len(OFFLINE_SUFFIX)] if local and t.endswith(OFFLINE_SUFFIX) else t
        names[base] = local or t
    all_local = all(v.endswith(OFFLINE_SUFFIX) and offline_task_name(v) for v in names.values())
    any_local = any(v.endswith(OFFLINE_SUFFIX) and offline_task_name(v) for v in names.values())
    folder = Path(evalsets) if evalsets is not None else DEFAULT_OUT
    if any_local and num_fewshot:  # lm-eval would draw the shots from the split being scored
        raise ValueError(
            f"num_fewshot={num_fewshot}: the offline sets hold only the evaluated split, so lm-eval would take the "
            "few-shot examples from the very documents it scores; run zero-shot, or use stock tasks (stock=True)"
        )
    if any_local:
        manifest = read_evalsets_manifest(folder)
        missing = [b for b, v in names.items() if v.endswith(OFFLINE_SUFFIX) and b not in manifest["sets"]]
        if missing:
            raise FileNotFoundError(f"{folder} lacks {missing}; rebuild: python -m repro data evalsets --out {folder}")
        for b, v in names.items():  # a truncated set would be scored as if whole: check size and sha256
            if v.endswith(OFFLINE_SUFFIX):
                verify_set(folder, b, manifest)
    lm = model if isinstance(model, LM) else ReproLM(model, tokenizer, batch_size=batch_size, device=device)
    with tempfile.TemporaryDirectory(prefix="repro-lm-eval-tasks-") as tmp, hf_offline(all_local):
        include = write_task_configs(folder, tmp) if any_local else None
        tm = TaskManager(include_path=str(include) if include else None, include_defaults=not all_local)
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=list(names.values()),
            num_fewshot=num_fewshot,
            limit=limit,
            bootstrap_iters=0,  # our own bootstrap below
            log_samples=True,
            task_manager=tm,
        )
    frame = _summarise(results, names, iters=bootstrap_iters, confidence=confidence, seed=seed)
    frame.attrs["limit"] = limit
    return (frame, results) if return_raw else frame
