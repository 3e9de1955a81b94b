"""The pieces the loop is assembled from: process group, model, data, validation, timer. Kept apart
so ``loop.train`` reads as the sequence of a step."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from repro.data import DataError, TokenFile
from repro.dist_guard import dist_timeout_s
from repro.models.gpt2 import build_gpt2, ffn_linears
from repro.provenance import REPO
from repro.train.config import RECIPE_MODES, TrainConfig
from repro.train.step import lm_loss

__all__ = [
    "Dist",
    "TrainData",
    "build_model",
    "build_optimizer",
    "evaluate",
    "init_distributed",
    "now",
    "recipe_factory",
    "sparse_layers",
]

VAL_SEED = 1_000_003  # validation windows: the same for every run and seed, so val losses compare
_VERIFY_BYTES = 1 << 30  # hash token files up to this size when a run starts


@dataclass(frozen=True)
class Dist:
    """This process's place in a ``torchrun`` job (rank 0 of 1 when run alone)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owns_group: bool = False  # we called init_process_group, so we destroy it

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str | torch.device | None = None) -> Dist:
    """Join the process group that ``torchrun`` describes in the environment (gloo on CPU, nccl on
    CUDA: the device asked for, else CUDA where there is one), every collective bounded by
    ``REPRO_DIST_TIMEOUT_S`` (``repro.dist_guard``); alone without it."""
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return Dist()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    owns = not dist.is_initialized()
    if owns:
        # `--device cpu` on a GPU host: gloo (nccl would fail on the first collective of CPU tensors)
        cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
        if cuda:
            torch.cuda.set_device(local)
        backend = "nccl" if cuda else "gloo"
        if backend == "nccl":  # the watchdog aborts a timed-out collective (torch's default since 2.2)
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
        dist.init_process_group(backend, timeout=timedelta(seconds=dist_timeout_s()))
    return Dist(dist.get_rank(), dist.get_world_size(), local, owns)


def pick_device(d: Dist, device: str | torch.device | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda", d.local_rank) if torch.cuda.is_available() else torch.device("cpu")


def build_model(cfg: TrainConfig, device: torch.device) -> nn.Module:
    """The GPT-2 of ``cfg`` on ``device``, initialised from ``cfg.seed``; sparse FFN linears carry the
    recipe (decay on the gradient, MVUE switch; the dense phase is driven by the loop)."""
    factory = None
    if cfg.sparse:
        from kernels.layers.sparse_linear import SparseLinear

        kw: dict[str, Any] = {"mvue": cfg.mvue} if cfg.mode == "fst" else {}
        factory = functools.partial(
            SparseLinear,
            mode=cfg.gpt2().ffn_mode,
            decay=cfg.layer_decay,
            dense_fraction=0.0,
            mask_interval=cfg.mask_interval,
            track_flip=cfg.track_flip,
            checks=False,
            **kw,
        )
    if cfg.arch == "llama":
        from repro.train.flexmask import build_llama

        torch.manual_seed(cfg.seed)
        with torch.device(device):
            return build_llama(cfg)
    if cfg.mode in RECIPE_MODES:
        factory = recipe_factory(cfg)
    torch.manual_seed(cfg.seed)
    with torch.device(device):
        return build_gpt2(cfg.gpt2(), linear_factory=factory)


def recipe_factory(cfg: TrainConfig) -> Any:
    """The FFN linear of STEP / Bi-Mask (``kernels.layers.recipes``): Bi-Mask refreshes its
    permutation every ``mask_interval`` steps, each layer drawing from its own seed."""
    from kernels.layers import recipes

    if cfg.mode == "step":
        return functools.partial(recipes.StepLinear, decay=cfg.layer_decay, track_flip=cfg.track_flip)
    counter = iter(range(1 << 30))

    def bimask(i: int, o: int, bias: bool = True) -> nn.Module:
        return recipes.BiMaskLinear(
            i,
            o,
            bias,
            decay=cfg.layer_decay,
            track_flip=cfg.track_flip,
            perm_interval=cfg.mask_interval,
            seed=cfg.seed * 4096 + next(counter),
        )

    return bimask


def build_optimizer(cfg: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """``make_optimizer``'s AdamW, or for ``mode='step'`` the same groups in STEP's AdamW (variance
    frozen at the switch point; the switch also turns the StepLinear layers 2:4)."""
    from repro.train.step import make_optimizer

    opt = make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas)
    if cfg.mode != "step":
        return opt
    from kernels.layers.recipes import StepAdamW, StepLinear

    layers = [m for m in model.modules() if isinstance(m, StepLinear)]
    groups = [{k: v for k, v in g.items() if k in ("params", "weight_decay")} for g in opt.param_groups]
    kw = {"fused": True} if all(p.is_cuda for g in groups for p in g["params"]) else {}
    return StepAdamW(
        groups, layers=layers, total_steps=cfg.steps, switch_at=cfg.step_switch_at(), lr=cfg.lr, betas=cfg.betas, **kw
    )


def flip_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Name -> linear whose flip rate a run logs: GPT-2's FFN linears (dense ones by their 2:4
    mask, Hu et al. Fig. 3), a Llama run's masked linears (``FlexMaskedLinear``, which count their
    own flips at each refresh); none for a dense Llama run (no mask to flip)."""
    ffn = ffn_linears(model)
    if ffn:
        return {n: m for n, m in model.named_modules() if any(m is f for f in ffn)}
    return {n: m for n, m in model.named_modules() if hasattr(m, "flip_rate_tensor") and hasattr(m, "pattern")}


def sparse_layers(model: nn.Module) -> list[nn.Module]:
    """The FFN linears with a sparse mode (SparseLinear, mode != dense)."""
    return [m for m in ffn_linears(model) if getattr(m, "mode", "dense") != "dense" and hasattr(m, "set_dense")]


MVUE_RANK_STRIDE = 1 << 40
"""Rank r's MVUE seeds start this far from rank 0's: each use advances a seed by one, so ranks
draw from disjoint Philox streams for 2**40 uses."""


@torch.no_grad()
def spread_mvue_seeds(model: nn.Module, rank: int) -> None:
    """Give this rank its own MVUE draws. ``torch.manual_seed(cfg.seed)`` builds the same model,
    and so the same seeds, on every rank: each rank then applied the same random choices to its
    own data, where one process with the whole batch draws independently for every sequence.
    Checkpoints hold rank 0's seeds; each rank calls this after a build and after a restore."""
    if rank:
        for m in model.modules():
            seed = getattr(m, "mvue_seed", None)
            if isinstance(seed, torch.Tensor):
                seed.add_(rank * MVUE_RANK_STRIDE).remainder_(2**62)


def resolve_data(path: str) -> Path:
    """A token folder: as given, else relative to the repository (the default ``data/offline-en``)."""
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO / p


def check_windows(files: Iterable[TokenFile], seq_len: int) -> None:
    """Every split holds one window of ``seq_len + 1`` tokens (else the run would fail at its first
    evaluation, steps later). Cheap (the manifest's counts): ``ensure_run`` calls it before it makes
    the run folder, so a corpus too small leaves no half-made run behind."""
    for tf in files:
        if len(tf) < seq_len + 1:
            raise DataError(
                f"{tf.path} holds {len(tf)} tokens, too few for one window of seq_len {seq_len} + 1 "
                f"(every run evaluates on the val split); rebuild it with: {tf.rebuild}"
            )


class TrainData:
    """Train and validation token files; the batch of step s depends only on (seed, s), and each rank
    takes its slice of that one draw, so resume and the number of processes do not change the data."""

    def __init__(self, cfg: TrainConfig, d: Dist, device: torch.device, vocab_size: int) -> None:
        folder = resolve_data(cfg.data)
        self.train, self.val = TokenFile(folder, "train"), TokenFile(folder, "val")
        n_vocab = int(self.train.manifest.get("tokenizer", {}).get("n_vocab", 0))
        if n_vocab > vocab_size:
            raise DataError(f"{folder} has a vocabulary of {n_vocab} ids; model {cfg.model!r} embeds {vocab_size}")
        for tf in (self.train, self.val):
            if tf.path.stat().st_size <= _VERIFY_BYTES:
                tf.verify()
        check_windows((self.train, self.val), cfg.seq_len)
        self.identity = {"train": self.train.identity(), "val": self.val.identity()}
        self.cfg, self.d, self.device = cfg, d, device
        self.per_rank = cfg.batch_size * cfg.grad_accum

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's [batch_size * grad_accum, seq_len] inputs and targets of optimizer step ``step``."""
        n = self.per_rank
        x, y = self.train.batch(n * self.d.world, self.cfg.seq_len, step=step, seed=self.cfg.seed)
        lo = self.d.rank * n
        return _to(x[lo : lo + n], self.device), _to(y[lo : lo + n], self.device)

    def val_batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of validation batch ``i``: ``batch_size`` windows a rank, of one draw
        of ``batch_size * world`` (as training slices its batches). The validation set is thus
        fixed by ``batch_size * world`` and ``eval_batches`` (not by ``grad_accum``, which would
        multiply the cost of every evaluation): compare validation losses between runs that share
        them, as every suite's methods do; 1 process of batch 4 and 2 of batch 2 share them."""
        n = self.cfg.batch_size
        x, y = self.val.batch(n * self.d.world, self.cfg.seq_len, step=i, seed=VAL_SEED)
        lo = self.d.rank * n
        return _to(x[lo : lo + n], self.device), _to(y[lo : lo + n], self.device)


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    # from pinned memory on CUDA: a copy from pageable memory would synchronise the stream
    t = t.contiguous()
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t.to(device)


@torch.no_grad()
def evaluate(model: nn.Module, data: TrainData, batches: int, amp_dtype: torch.dtype | None) -> float:
    """Mean validation loss over the fixed validation batches (reads the device once). Every rank
    calls it: each evaluates its slice of each batch, and the mean is taken over all ranks'
    (before session 58 rank 0 alone evaluated ``batch_size`` windows, so a run on 2 processes of
    batch 2 reported another validation set's loss than one process of batch 4)."""
    was = model.training
    model.eval()
    losses = []
    for i in range(batches):
        x, y = data.val_batch(i)
        with torch.autocast(x.device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            losses.append(lm_loss(model, x, y))
    model.train(was)
    mean = torch.stack(losses).float().mean()
    if data.d.world > 1:  # equal slices: the mean of the ranks' means is the mean over the batch
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)
        mean = mean / data.d.world
    return float(mean)


def now(device: torch.device) -> Any:
    """A timestamp of the device's stream: a recorded CUDA event, else ``perf_counter`` seconds."""
    if device.type == "cuda":
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev
    return time.perf_counter()
