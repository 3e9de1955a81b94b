"""A model to evaluate from a training checkpoint (``repro.train``'s ``checkpoint.pt``: ``model``
state dict, ``config`` = the run's ``TrainConfig`` as a dict, ``sparse`` = each sparse layer's
``sparse_state_dict``), a checkpoint whose ``config`` is a model config dataclass as a dict, or a
bare state dict with ``--config``. A ``TrainConfig`` rebuilds the run's own model (GPT-2 with its
recipe's sparse FFN, or the Llama model with its flex-SS masked linears) through ``repro.train``.

GPT-2 configs (``d_model`` ...) rebuild through ``build_gpt2`` (so ``ffn_mode`` rebuilds the sparse
FFN linears and their sparse state is restored); Llama-style configs (``hidden`` ...) rebuild dense
(a Llama checkpoint trained with a ``linear_factory`` must be rebuilt by its caller and passed to
``evaluate`` as a module).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

CHECKPOINT_NAME = "checkpoint.pt"


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint dict (a file, or a folder holding checkpoint.pt), on the CPU, weights only."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT_NAME
    if not p.is_file():
        raise FileNotFoundError(f"no checkpoint at {p}")
    ckpt = torch.load(p, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict):
        raise ValueError(f"{p} does not hold a dict")
    if "model" not in ckpt:  # a bare state dict
        ckpt = {"model": ckpt}
    return ckpt


def model_from_config(config: dict[str, Any]) -> nn.Module:
    from repro.models.gpt2 import GPT2Config, build_gpt2
    from repro.models.llama import LlamaConfig, LlamaModel
    from repro.train.config import TrainConfig

    train_keys = {f.name for f in dataclasses.fields(TrainConfig)}
    if {"mode", "steps", "lr"} <= set(config) and set(config) <= train_keys:  # repro.train's checkpoint
        from repro.train.parts import build_model

        return build_model(TrainConfig.from_dict(config), torch.device("cpu"))
    for cls, build in ((GPT2Config, build_gpt2), (LlamaConfig, LlamaModel)):
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        if required <= set(config) and set(config) <= names:
            return build(cls(**config))
    raise ValueError(f"config {sorted(config)} is neither a TrainConfig, a GPT2Config nor a LlamaConfig")


def load_model(
    path: str | os.PathLike, config: dict[str, Any] | None = None, device: str | torch.device = "cpu"
) -> nn.Module:
    """The model of checkpoint ``path`` (config from the checkpoint unless given), in eval mode."""
    ckpt = read_checkpoint(path)
    cfg = config if config is not None else ckpt.get("config")
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} stores no model config; pass config= (a GPT2Config/LlamaConfig as a dict)")
    model = model_from_config(cfg)
    model.load_state_dict(ckpt["model"])
    for name, state in (ckpt.get("sparse") or {}).items():
        model.get_submodule(name).load_sparse_state_dict(state)
    return model.to(device).eval()
