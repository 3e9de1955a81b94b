"""FAST Table I's models for the pretraining loop (``TrainConfig(arch="llama", mask=...)``): a
Llama-style decoder (``repro.models.llama``) whose seven block linears (q, k, v, o, gate, up, down)
train under a flex-SS mask from ``kernels.ops.flex.flex_mask`` at 50% density (4:8, unstructured,
TBS(8,8)), or dense.

Choices (FAST does not spell them out; docs/methods.md lists them):

* The weights stay dense (master copy); the forward uses W * M, and the gradient reaches all of W
  straight through (no masked decay), so pruned weights keep learning and a mask refresh can bring
  them back. Masks are recomputed from the weights every ``mask_interval`` optimizer steps (and
  before the first forward).
* Each linear keeps exactly 50% of its entries (its own pivot, not FAST's model-wide one), so the
  non-zero count of a model is fixed by its shape.
* Width matching (the paper's "*": sparse models scaled to the dense non-zero count): the sparse
  models widen the FFN only, d_ff' = 2 d_ff + 4 h / 3 solves 0.5 (4 h^2 + 3 h d_ff') = 4 h^2 + 3 h d_ff
  (attention and FFN linears at 50%), rounded up to a multiple of 8 (TBS(8,8) tiles, 4:8 groups);
  embeddings and the output projection are dense in every model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from repro.models.llama import CONFIGS, LlamaConfig, LlamaModel, sparse_linears

__all__ = [
    "DENSITY",
    "LLAMA_MODELS",
    "PATTERNS",
    "FlexMaskedLinear",
    "build_llama",
    "llama_config",
    "nonzero_weights",
    "widened_ffn",
]

DENSITY = 0.5
PATTERNS = {"4:8": "4:8", "us": "unstructured", "tbs88": "TBS(8,8)"}
"""``TrainConfig.mask`` -> ``kernels.ops.patterns.parse_pattern`` spec."""

LLAMA_MODELS: dict[str, LlamaConfig] = {
    # CPU smoke: one block, byte vocabulary
    "llama-micro": LlamaConfig(hidden=32, ffn=64, layers=1, heads=2, vocab=257, seq_len=64),  # + end-of-text
    "llama-tiny": CONFIGS["tiny"],
    # the H100 scale: MAP-NEO's shape rules (SwiGLU, untied embeddings, head dim 64) at ~30M
    # non-embedding parameters, GPT-2's BPE vocabulary (the offline corpus's tokenizer), padded
    "llama-small": LlamaConfig(hidden=512, ffn=1536, layers=8, heads=8, vocab=50304, seq_len=1024),
}


def widened_ffn(hidden: int, ffn: int, density: float = DENSITY, multiple: int = 8) -> int:
    """The FFN width at which a model with all block linears at ``density`` has (at least) the
    block non-zeros of the dense model of width ``ffn``."""
    dense = 4 * hidden * hidden + 3 * hidden * ffn
    f = (dense / density - 4 * hidden * hidden) / (3 * hidden)
    return int(math.ceil(f / multiple) * multiple)


def llama_config(name: str, mask: str, seq_len: int) -> LlamaConfig:
    """The model ``name`` for ``mask`` (sparse: FFN widened) with ``seq_len`` positions."""
    base = LLAMA_MODELS[name]
    ffn = base.ffn if mask == "dense" else widened_ffn(base.hidden, base.ffn)
    return dataclasses.replace(base, ffn=ffn, seq_len=seq_len)


def nonzero_weights(cfg: LlamaConfig, mask: str) -> int:
    """Non-zero weights of the model: block linears at their density, embeddings and norms dense."""
    block = 4 * cfg.hidden * cfg.hidden + 3 * cfg.hidden * cfg.ffn
    density = 1.0 if mask == "dense" else DENSITY
    dense_rest = 2 * cfg.vocab * cfg.hidden + (2 * cfg.layers + 1) * cfg.hidden
    return int(round(cfg.layers * block * density)) + dense_rest


class _STEMask(torch.autograd.Function):
    """W * M forward, the whole gradient to W (straight-through)."""

    @staticmethod
    def forward(ctx: Any, w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return w * mask

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor):  # type: ignore[override]
        return g, None


class FlexMaskedLinear(nn.Linear):
    """``nn.Linear`` with a flex-SS mask refreshed every ``mask_interval`` optimizer steps (same
    step protocol as ``SparseLinear``: ``after_optimizer_step``, ``flip_rate_tensor``,
    ``sparse_state_dict``)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = False,
        *,
        mask: str = "4:8",
        mask_interval: int = 40,
        seed: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        from kernels.ops.common import check_int
        from kernels.ops.patterns import parse_pattern

        if mask not in PATTERNS:
            raise ValueError(f"mask must be one of {sorted(PATTERNS)}, got {mask!r}")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.mode, self.pattern_name = mask, mask
        self.pattern = parse_pattern(PATTERNS[mask])
        self.mask_interval = check_int("mask_interval", mask_interval, lo=1)  # int() truncated 2.9 to 2, took 0
        self.seed = int(seed)
        self.register_buffer("_mask", torch.ones(out_features, in_features, dtype=torch.bool), persistent=False)
        self._stale = True
        self._flip_count: torch.Tensor | None = None

    @torch.no_grad()
    def make_mask(self) -> torch.Tensor:
        """This pattern's mask of the current weights at 50% density."""
        from kernels.ops.flex import flex_mask

        return flex_mask(self.weight.detach().float(), self.pattern, DENSITY, seed=self.seed, check_finite=False)

    @torch.no_grad()
    def refresh_mask(self) -> None:
        """Recompute the mask now; the flip rate counts the entries that changed."""
        new = self.make_mask()
        self._flip_count = None if self._stale else torch.count_nonzero(new != self._mask)
        self._mask.copy_(new)
        self._stale = False

    @property
    def mask(self) -> torch.Tensor:
        """The mask in use (computed on first use)."""
        if self._stale:
            self.refresh_mask()
        return self._mask

    @property
    def flip_rate_tensor(self) -> torch.Tensor | None:
        """Changed mask entries at the last refresh / entries (None on steps without a refresh)."""
        return None if self._flip_count is None else self._flip_count.float() / self.weight.numel()

    def after_optimizer_step(self, step: int, total_steps: int) -> None:
        """Refresh every ``mask_interval`` steps."""
        self._flip_count = None
        if step % self.mask_interval == 0:
            self.refresh_mask()

    def sparse_state_dict(self) -> dict[str, Any]:
        """Mask in use (outside ``state_dict``)."""
        return {"mode": self.mode, "mask": self._mask.detach().clone(), "stale": self._stale}

    @torch.no_grad()
    def load_sparse_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`sparse_state_dict`."""
        if not isinstance(state, dict) or not {"mode", "mask", "stale"} <= state.keys():
            raise ValueError("state must be a dict from sparse_state_dict() with keys mode, mask, stale")
        if state.get("mode") != self.mode:
            raise ValueError(f"state is for mask {state.get('mode')!r}, this layer has {self.mode!r}")
        val = state["mask"]  # copy_ would broadcast a wrong shape and cast a wrong dtype silently
        if not isinstance(val, torch.Tensor) or val.shape != self._mask.shape or val.dtype != torch.bool:
            raise ValueError(f"state['mask'] must be a bool tensor of shape {tuple(self._mask.shape)}")
        self._mask.copy_(val)
        self._stale = bool(state["stale"])
        self._flip_count = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, _STEMask.apply(self.weight, self.mask), self.bias)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", mask={self.pattern_name!r}, mask_interval={self.mask_interval}"


def build_llama(cfg: Any) -> LlamaModel:
    """The Llama model of a ``TrainConfig`` (``arch='llama'``), on the current default device and
    from the current RNG state; sparse masks replace the seven block linears."""
    lcfg = llama_config(cfg.model, cfg.mask, cfg.seq_len)
    model = LlamaModel(lcfg)
    if cfg.mask == "dense":
        return model
    for i, (name, lin) in enumerate(sparse_linears(model).items()):
        parent, _, attr = name.rpartition(".")
        new = FlexMaskedLinear(
            lin.in_features,
            lin.out_features,
            bias=lin.bias is not None,
            mask=cfg.mask,
            mask_interval=cfg.mask_interval,
            seed=cfg.seed * 4096 + i,
            device=lin.weight.device,
        )
        with torch.no_grad():
            new.weight.copy_(lin.weight)
        setattr(model.get_submodule(parent), attr, new)
    return model
