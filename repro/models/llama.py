"""A small Llama-style decoder: the model of the end-to-end sparse-training measurements.

Pre-norm blocks (RMSNorm -> causal self-attention with rotary position embeddings -> residual,
RMSNorm -> SwiGLU feed-forward -> residual), a final RMSNorm and an untied output projection. No
biases; every weight matrix and the embedding start as N(0, 0.02), norm gains as ones. Attention
goes through ``F.scaled_dot_product_attention(is_causal=True)`` (flash attention under bf16 on a
GPU). The seven linears of a block (q, k, v, o, gate, up, down) are the *sparse linears*: the ones
2:4 / flex-SS training masks (``block_linear_shapes``, ``sparse_linears``); the embedding and the
output projection stay dense. ``LlamaModel(cfg, linear_factory=...)`` builds the SwiGLU linears
(gate, up, down) with another module (e.g. a sparse linear); the default is nn.Linear.

Configurations (``CONFIGS``):

- ``map-neo-7b``: MAP-Neo 7B as published (hidden 3072, FFN 24576, 28 layers, 16 heads, vocab
  64256), about 7.8B parameters with untied embeddings.
- ``llama2-13b``: Llama 2 13B (hidden 5120, FFN 13824, 40 layers, 40 heads, vocab 32000), about
  13.0B parameters.
- ``map-neo-460m``: **ASSUMPTION.** MAP-Neo's 460M model is named but its configuration is not
  published. We keep what the 7B model fixes (vocab 64256, untied input/output embeddings, SwiGLU,
  head dim 64 where possible) and pick the usual shape of a ~0.5B Llama: hidden 1024, FFN 3072
  (3x hidden, a multiple of 256), 24 layers, 16 heads (head dim 64). The count is
  2 * 64256 * 1024 (embedding + output) = 131.6M, plus per block 4 * 1024^2 (attention) +
  3 * 1024 * 3072 (SwiGLU) + 2 * 1024 (norms) = 13.63M, times 24 = 327.2M, plus the final norm:
  458,802,176 parameters, i.e. "460M" to the precision the name is given. A test asserts it.
- ``tiny``: hidden 64, FFN 128, 2 layers, 4 heads, vocab 256, seq_len 64; tests and smoke runs.

``seq_len`` is the training sequence length the suites use (and the length of the rotary table),
not the published context window; ``dataclasses.replace(cfg, layers=2)`` gives a shallower model
of the same width, e.g. to time a few blocks of a model too large to train on one GPU.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from repro.models._layout import prefer_col_major_output

__all__ = [
    "CONFIGS",
    "Attention",
    "Block",
    "LlamaConfig",
    "LlamaModel",
    "RMSNorm",
    "RotaryEmbedding",
    "SwiGLU",
    "apply_rotary",
    "block_linear_shapes",
    "count_parameters",
    "param_count",
    "sparse_linear_count",
    "sparse_linears",
    "train_flops_per_token",
]

INIT_STD = 0.02


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int
    ffn: int
    layers: int
    heads: int
    vocab: int
    seq_len: int = 2048
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("hidden", "ffn", "layers", "heads", "vocab", "seq_len"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"LlamaConfig.{name} must be a positive int, got {v!r}")
        if self.hidden % self.heads:
            raise ValueError(f"LlamaConfig: hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if (self.hidden // self.heads) % 2:
            raise ValueError(
                f"LlamaConfig: head dim hidden/heads = {self.hidden // self.heads} must be even (rotary embeddings)"
            )
        if not (self.norm_eps > 0 and math.isfinite(self.norm_eps)):
            raise ValueError(f"LlamaConfig.norm_eps must be finite and > 0, got {self.norm_eps!r}")
        if not (self.rope_theta > 0 and math.isfinite(self.rope_theta)):
            raise ValueError(f"LlamaConfig.rope_theta must be finite and > 0, got {self.rope_theta!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


CONFIGS: dict[str, LlamaConfig] = {
    "map-neo-7b": LlamaConfig(hidden=3072, ffn=24576, layers=28, heads=16, vocab=64256),
    "llama2-13b": LlamaConfig(hidden=5120, ffn=13824, layers=40, heads=40, vocab=32000),
    # ASSUMPTION (config not published): see the module docstring.
    "map-neo-460m": LlamaConfig(hidden=1024, ffn=3072, layers=24, heads=16, vocab=64256),
    "tiny": LlamaConfig(hidden=64, ffn=128, layers=2, heads=4, vocab=256, seq_len=64),
}

# Sparse linears of one block, in the order of ``block_linear_shapes`` and ``sparse_linears``.
_ATTN_LINEARS = ("q", "k", "v", "o")
_FFN_LINEARS = ("gate", "up", "down")


def block_linear_shapes(cfg: LlamaConfig) -> list[tuple[str, int, int]]:
    """(name, out_features, in_features) of the sparse linears of one block."""
    h, f = cfg.hidden, cfg.ffn
    return [("q", h, h), ("k", h, h), ("v", h, h), ("o", h, h), ("gate", f, h), ("up", f, h), ("down", h, f)]


def sparse_linear_count(cfg: LlamaConfig) -> int:
    """Weights in the sparse linears of all blocks."""
    return cfg.layers * sum(o * i for _, o, i in block_linear_shapes(cfg))


def param_count(cfg: LlamaConfig) -> int:
    """Parameters of ``LlamaModel(cfg)`` (untied embedding and output projection, norm gains)."""
    embed_and_head = 2 * cfg.vocab * cfg.hidden
    norms = (2 * cfg.layers + 1) * cfg.hidden
    return embed_and_head + sparse_linear_count(cfg) + norms


def count_parameters(model: nn.Module) -> int:
    """Parameters of an instantiated model."""
    return sum(p.numel() for p in model.parameters())


def train_flops_per_token(cfg: LlamaConfig, seq_len: int | None = None, causal: bool = True) -> float:
    """Training FLOPs per token (forward + backward = 3x forward), the usual MFU accounting.

    6 * (matmul weights: sparse linears + output projection; the embedding is a lookup) plus the
    attention score/value products, 12 * layers * hidden * seq_len (PaLM's formula), halved when
    ``causal`` (only the lower triangle is computed by a causal flash kernel).
    """
    t = cfg.seq_len if seq_len is None else seq_len
    dense = 6 * (sparse_linear_count(cfg) + cfg.vocab * cfg.hidden)
    attn = 12 * cfg.layers * cfg.hidden * t
    return float(dense + (attn / 2 if causal else attn))


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * gain, computed in float32, returned in the input dtype."""

    def __init__(self, dim: int, eps: float = 1e-5, device=None, dtype=None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


class RotaryEmbedding(nn.Module):
    """cos/sin tables of rotary position embeddings (rotate-half layout, as Llama).

    The tables are float32 and cached per device outside the module's buffers, so ``model.to(
    torch.bfloat16)`` does not round them; positions beyond ``max_len`` are refused.
    """

    def __init__(self, head_dim: int, max_len: int, theta: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head dim, got {head_dim}")
        self.head_dim = head_dim
        self.max_len = max_len
        self.theta = theta
        self._cache: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def tables(self, seq_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape [seq_len, head_dim], float32 on ``device``."""
        if seq_len > self.max_len:
            raise ValueError(f"sequence length {seq_len} exceeds the rotary table length seq_len={self.max_len}")
        device = torch.device(device)
        if device not in self._cache:
            half = self.head_dim // 2
            inv_freq = 1.0 / (self.theta ** (torch.arange(half, dtype=torch.float64) * 2 / self.head_dim))
            pos = torch.arange(self.max_len, dtype=torch.float64)
            ang = torch.outer(pos, inv_freq)
            ang = torch.cat([ang, ang], dim=-1)
            self._cache[device] = (ang.cos().float().to(device), ang.sin().float().to(device))
        cos, sin = self._cache[device]
        return cos[:seq_len], sin[:seq_len]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., T, head_dim] by position (float32 math, result in x's dtype)."""
    xf = x.float()
    return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)


def _linear(i: int, o: int, device=None, dtype=None) -> nn.Linear:
    return nn.Linear(i, o, bias=False, device=device, dtype=dtype)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig, device=None, dtype=None) -> None:
        super().__init__()
        h = cfg.hidden
        self.heads = cfg.heads
        self.head_dim = cfg.head_dim
        self.q = _linear(h, h, device, dtype)
        self.k = _linear(h, h, device, dtype)
        self.v = _linear(h, h, device, dtype)
        self.o = _linear(h, h, device, dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # -1 heads: under tensor parallelism (column-wise q, k, v) a rank holds heads / tp of them
        shape = (b, t, -1, self.head_dim)
        q = self.q(x).view(shape).transpose(1, 2)
        k = self.k(x).view(shape).transpose(1, 2)
        v = self.v(x).view(shape).transpose(1, 2)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)).

    ``linear_factory(in_features, out_features, bias=False) -> nn.Module`` replaces the three
    bias-free nn.Linear layers (e.g. a sparse linear); its modules are moved to device/dtype.
    """

    def __init__(
        self, cfg: LlamaConfig, device=None, dtype=None, linear_factory: Callable[..., nn.Module] | None = None
    ) -> None:
        super().__init__()
        if linear_factory is None:
            make = functools.partial(_linear, device=device, dtype=dtype)
        elif not callable(linear_factory):
            raise TypeError(f"linear_factory must be callable, got {type(linear_factory).__name__}")
        else:

            def make(i: int, o: int) -> nn.Module:
                m = linear_factory(i, o, bias=False)
                return m.to(device=device, dtype=dtype) if device is not None or dtype is not None else m

        self.gate = make(cfg.hidden, cfg.ffn)
        self.up = make(cfg.hidden, cfg.ffn)
        self.down = make(cfg.ffn, cfg.hidden)
        for m in (self.gate, self.up):  # column-major inner activations
            prefer_col_major_output(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(
        self, cfg: LlamaConfig, device=None, dtype=None, linear_factory: Callable[..., nn.Module] | None = None
    ) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden, cfg.norm_eps, device, dtype)
        self.attn = Attention(cfg, device, dtype)
        self.ffn_norm = RMSNorm(cfg.hidden, cfg.norm_eps, device, dtype)
        self.ffn = SwiGLU(cfg, device, dtype, linear_factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class LlamaModel(nn.Module):
    """tokens [B, T] (int) -> logits [B, T, vocab]; ``loss(tokens)`` is next-token cross entropy.

    ``linear_factory`` (optional) builds the SwiGLU linears (gate, up, down) of every block, called as
    ``linear_factory(in_features, out_features, bias=False)``; default nn.Linear.
    """

    def __init__(
        self, cfg: LlamaConfig, device=None, dtype=None, linear_factory: Callable[..., nn.Module] | None = None
    ) -> None:
        super().__init__()
        if not isinstance(cfg, LlamaConfig):
            raise TypeError(f"cfg must be a LlamaConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden, device=device, dtype=dtype)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.seq_len, cfg.rope_theta)
        self.layers = nn.ModuleList(Block(cfg, device, dtype, linear_factory) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps, device, dtype)
        self.lm_head = _linear(cfg.hidden, cfg.vocab, device, dtype)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                m.weight.normal_(0.0, INIT_STD)
            elif isinstance(m, RMSNorm):
                m.weight.fill_(1.0)
            elif isinstance(getattr(m, "weight", None), nn.Parameter) and m.weight.dim() == 2:
                m.weight.normal_(0.0, INIT_STD)  # a factory-made linear that is not an nn.Linear

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be an integer tensor, got {tokens.dtype}")
        cos, sin = self.rope.tables(tokens.shape[1], tokens.device)
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Mean cross entropy of predicting tokens[:, 1:] from tokens[:, :-1] (float32)."""
        if tokens.dim() != 2 or tokens.shape[1] < 2:
            raise ValueError(f"loss needs tokens [batch, seq] with seq >= 2, got shape {tuple(tokens.shape)}")
        logits = self(tokens)[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))

    def num_parameters(self) -> int:
        return count_parameters(self)


def sparse_linears(model: LlamaModel) -> dict[str, nn.Linear]:
    """Qualified name -> Linear for q, k, v, o, gate, up, down of every block, block by block."""
    out: dict[str, nn.Linear] = {}
    for i, block in enumerate(model.layers):
        for name in _ATTN_LINEARS:
            out[f"layers.{i}.attn.{name}"] = getattr(block.attn, name)
        for name in _FFN_LINEARS:
            out[f"layers.{i}.ffn.{name}"] = getattr(block.ffn, name)
    return out
