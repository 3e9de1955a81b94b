"""GPT-2 family for the 2:4 sparse-training speed and accuracy runs (Hu et al. 2024, Table 8 / Figure 6).

Architecture as GPT-2: learned token and position embeddings, pre-LayerNorm blocks (LayerNorm ->
causal self-attention -> residual, LayerNorm -> MLP -> residual), a final LayerNorm and an output
projection tied to the token embedding. Attention goes through
``F.scaled_dot_product_attention(is_causal=True)``; the fused qkv projection is ``attn.c_attn``
(d -> 3d) and the output projection ``attn.c_proj``.

The two FFN linears (``mlp.fc``: d -> d_ff, or d -> 2 * d_ff for GEGLU/SwiGLU with the gate half
first; ``mlp.proj``: d_ff -> d) are the ones 2:4 training replaces. They are built through a
``linear_factory(in_features, out_features, bias=...) -> nn.Module`` so any FFN linear can be
swapped; attention linears through ``attn_linear_factory``. Defaults are ``nn.Linear``; with
``ffn_mode`` naming a ``kernels.layers.sparse_linear.SparseLinear`` mode ("fst", "srste", "weight24", ...)
and no factory, the FFN linears are ``SparseLinear(..., mode=ffn_mode)``. ``ffn_mode="half"``
halves the FFN inner width: the paper's iso-FLOP dense baseline for a 2:4 FFN.

Initialisation (GPT-2 / nanoGPT): every linear weight and both embeddings N(0, 0.02), residual
output projections (``attn.c_proj``, ``mlp.proj``) N(0, 0.02 / sqrt(2 * n_layer)), biases 0,
LayerNorm gains 1. Factory-made modules are initialised the same way, in place through their
``weight``/``bias`` parameters, so dense and sparse runs start from the same distribution (a module
whose state derives from its weight, e.g. a mask, should derive it lazily).

Vocabulary padding: the embedding has ``padded_vocab`` rows (50257 -> 50304 with the default
``vocab_multiple=64``; a GEMM-friendly output width). ``forward`` returns logits for the real
``vocab_size`` only (a view), so the padded rows never enter a loss or a prediction: the model
computes the same function as an unpadded one; only ``param_count`` grows by the padding.

Parameter counts with ``vocab_multiple=1`` (tied embeddings, biases, GPT-2 as published):
per block 12 d^2 + 13 d (qkv 3d^2 + 3d, attn proj d^2 + d, fc 4d^2 + 4d, proj 4d^2 + d, two
LayerNorms 4d), plus vocab * d + 1024 * d embeddings and 2d for the final LayerNorm:

- ``gpt2-124m``: d 768, 12 layers, 12 heads: 124,439,808
- ``gpt2-350m``: d 1024, 24 layers, 16 heads: 354,823,168
- ``gpt2-774m``: d 1280, 36 layers, 20 heads: 774,030,080
- ``gpt2-1.5b``: d 1600, 48 layers, 25 heads: 1,557,611,200

(the counts of the released GPT-2 checkpoints). The padded ``CONFIGS`` entries add
(50304 - 50257) * d (36,096 for 124M).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from kernels.layers.sparse_activation import fst_act
from repro.models._layout import prefer_col_major_output

__all__ = [
    "CONFIGS",
    "CausalSelfAttention",
    "GPT2Block",
    "GPT2Config",
    "GPT2MLP",
    "GPT2Model",
    "LinearFactory",
    "block",
    "build_gpt2",
    "ffn_linears",
    "get_config",
    "mlp",
    "param_count",
    "resolve_linear_factory",
    "train_flops_per_token",
]

LinearFactory = Callable[..., nn.Module]
"""``factory(in_features, out_features, bias=bool) -> nn.Module`` mapping [..., in] -> [..., out]."""

INIT_STD = 0.02
FFN_KINDS = ("gelu", "geglu", "swiglu")
# ffn_mode values handled here; any other string must be a mode of kernels.layers.sparse_linear.SparseLinear.
_DENSE_MODES = ("dense", "half")
_KNOWN_SPARSE_MODES = ("fst", "srste", "weight24")
_GELU_APPROXIMATIONS = ("none", "tanh")


def _sparse_linear_module():
    """kernels.layers.sparse_linear, imported lazily (it pulls in Triton); a clear ImportError if it is absent."""
    try:
        return importlib.import_module("kernels.layers.sparse_linear")
    except ModuleNotFoundError as e:
        if e.name not in ("kernels.layers.sparse_linear", "kernels"):
            raise
        raise ImportError(
            "ffn_mode names a SparseLinear mode, but kernels.layers.sparse_linear is not available; "
            "pass linear_factory=... or use ffn_mode='dense' / 'half'"
        ) from e


@dataclass(frozen=True)
class GPT2Config:
    """Shape and FFN variant of a GPT-2 model. ``d_ff=None`` means 4 * d_model (resolved in ``ff_dim``)."""

    d_model: int = 768
    n_layer: int = 12
    n_head: int = 12
    vocab_size: int = 50257
    vocab_multiple: int = 64  # embedding rows padded to a multiple of this (1: no padding)
    seq_len: int = 1024  # n_positions: rows of the position embedding, longest sequence
    d_ff: int | None = None
    ffn: str = "gelu"  # "gelu" | "geglu" | "swiglu"
    ffn_mode: str = "dense"  # "dense" | "half" | a SparseLinear mode ("fst", "srste", "weight24", ...)
    dropout: float = 0.0
    bias: bool = True
    tie_embeddings: bool = True
    gelu_approximate: str = "tanh"  # GPT-2's "gelu_new"; also the GEGLU activation
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("d_model", "n_layer", "n_head", "vocab_size", "vocab_multiple", "seq_len"):
            _check_pos_int(f"GPT2Config.{name}", getattr(self, name))
        if self.d_ff is not None:
            _check_pos_int("GPT2Config.d_ff", self.d_ff)
        if self.d_model % self.n_head:
            raise ValueError(f"GPT2Config: d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.ffn not in FFN_KINDS:
            raise ValueError(f"GPT2Config.ffn must be one of {FFN_KINDS}, got {self.ffn!r}")
        if not isinstance(self.ffn_mode, str) or not self.ffn_mode:
            raise ValueError(f"GPT2Config.ffn_mode must be a non-empty string, got {self.ffn_mode!r}")
        if self.ffn_mode not in _DENSE_MODES + _KNOWN_SPARSE_MODES:
            _check_sparse_mode(self.ffn_mode)
        if self.ffn_mode == "half" and self.ff_dim % 2:
            raise ValueError(f"GPT2Config: ffn_mode='half' needs an even FFN width, got d_ff={self.ff_dim}")
        if not (isinstance(self.dropout, int | float) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"GPT2Config.dropout must be in [0, 1), got {self.dropout!r}")
        if self.gelu_approximate not in _GELU_APPROXIMATIONS:
            raise ValueError(f"GPT2Config.gelu_approximate must be one of {_GELU_APPROXIMATIONS}")
        if not (
            isinstance(self.layer_norm_eps, float) and self.layer_norm_eps > 0 and math.isfinite(self.layer_norm_eps)
        ):
            raise ValueError(f"GPT2Config.layer_norm_eps must be a finite float > 0, got {self.layer_norm_eps!r}")

    @property
    def n_positions(self) -> int:
        return self.seq_len

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def padded_vocab(self) -> int:
        """Rows of the token embedding / columns of the output projection."""
        return -(-self.vocab_size // self.vocab_multiple) * self.vocab_multiple

    @property
    def ff_dim(self) -> int:
        """FFN inner width of the full model (``d_ff`` or 4 * d_model)."""
        return 4 * self.d_model if self.d_ff is None else self.d_ff

    @property
    def ffn_hidden(self) -> int:
        """FFN inner width actually built: ``ff_dim``, halved for ``ffn_mode='half'``."""
        return self.ff_dim // 2 if self.ffn_mode == "half" else self.ff_dim

    @property
    def fc_out(self) -> int:
        """Output width of ``mlp.fc``: the inner width, doubled (gate, up) for GEGLU/SwiGLU."""
        return 2 * self.ffn_hidden if self.ffn in ("geglu", "swiglu") else self.ffn_hidden


def _check_pos_int(name: str, v: object) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ValueError(f"{name} must be a positive int, got {v!r}")


def _check_sparse_mode(mode: str) -> None:
    """Accept a mode string unknown here only if kernels.layers.sparse_linear lists it."""
    try:
        mod = _sparse_linear_module()
    except ImportError:
        mod = None
    modes = tuple(getattr(mod, "MODES", ())) if mod is not None else ()
    if mode not in modes:
        known = _DENSE_MODES + tuple(dict.fromkeys(_KNOWN_SPARSE_MODES + modes))
        raise ValueError(f"GPT2Config.ffn_mode must be one of {known}, got {mode!r}")


CONFIGS: dict[str, GPT2Config] = {
    "gpt2-124m": GPT2Config(d_model=768, n_layer=12, n_head=12),
    "gpt2-350m": GPT2Config(d_model=1024, n_layer=24, n_head=16),
    "gpt2-774m": GPT2Config(d_model=1280, n_layer=36, n_head=20),
    "gpt2-1.5b": GPT2Config(d_model=1600, n_layer=48, n_head=25),
    "tiny": GPT2Config(d_model=64, n_layer=2, n_head=4, vocab_size=256, seq_len=64),
}


def get_config(name: str) -> GPT2Config:
    """The named configuration; ValueError listing the known names otherwise."""
    if not isinstance(name, str) or name not in CONFIGS:
        raise ValueError(f"unknown GPT-2 config {name!r}; known: {sorted(CONFIGS)}")
    return CONFIGS[name]


def _as_config(cfg: GPT2Config | str) -> GPT2Config:
    if isinstance(cfg, str):
        return get_config(cfg)
    if not isinstance(cfg, GPT2Config):
        raise TypeError(f"cfg must be a GPT2Config or a config name, got {type(cfg).__name__}")
    return cfg


def resolve_linear_factory(cfg: GPT2Config, linear_factory: LinearFactory | None = None) -> LinearFactory:
    """The FFN linear factory: the given one, else SparseLinear for a sparse ``ffn_mode``, else nn.Linear."""
    if linear_factory is not None:
        if not callable(linear_factory):
            raise TypeError(f"linear_factory must be callable, got {type(linear_factory).__name__}")
        return linear_factory
    if cfg.ffn_mode in _DENSE_MODES:
        return nn.Linear
    sparse_linear = _sparse_linear_module()
    return functools.partial(sparse_linear.SparseLinear, mode=cfg.ffn_mode)


def _make_linear(factory: LinearFactory, i: int, o: int, bias: bool, what: str) -> nn.Module:
    m = factory(i, o, bias=bias)
    if not isinstance(m, nn.Module):
        raise TypeError(f"linear factory returned a {type(m).__name__} for {what}, not an nn.Module")
    return m


@torch.no_grad()
def _init_linear(m: nn.Module, std: float) -> None:
    """N(0, std) weight and zero bias, through the module's ``weight``/``bias`` parameters if it has them."""
    w = getattr(m, "weight", None)
    if isinstance(w, torch.Tensor) and w.dim() == 2:
        w.normal_(0.0, std)
    b = getattr(m, "bias", None)
    if isinstance(b, torch.Tensor):
        b.zero_()


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused qkv projection (GPT-2's c_attn / c_proj)."""

    def __init__(self, cfg: GPT2Config, linear_factory: LinearFactory | None = None) -> None:
        super().__init__()
        f = nn.Linear if linear_factory is None else linear_factory
        d = cfg.d_model
        self.n_head = cfg.n_head
        self.head_dim = cfg.head_dim
        self.dropout = float(cfg.dropout)
        self.c_attn = _make_linear(f, d, 3 * d, cfg.bias, "attn.c_attn")
        self.c_proj = _make_linear(f, d, d, cfg.bias, "attn.c_proj")
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=-1)
        shape = (b, t, self.n_head, self.head_dim)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.resid_drop(self.c_proj(y.transpose(1, 2).reshape(b, t, d)))


class GPT2MLP(nn.Module):
    """proj(act(fc(x))): GELU, or GEGLU / SwiGLU on fc's [..., 2 * d_ff] output (gate half first)."""

    def __init__(self, cfg: GPT2Config, linear_factory: LinearFactory | None = None) -> None:
        super().__init__()
        f = nn.Linear if linear_factory is None else linear_factory
        self.kind = cfg.ffn
        self.approximate = cfg.gelu_approximate
        self.fc = _make_linear(f, cfg.d_model, cfg.fc_out, cfg.bias, "mlp.fc")
        self.proj = _make_linear(f, cfg.ffn_hidden, cfg.d_model, cfg.bias, "mlp.proj")
        prefer_col_major_output(self.fc)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # F.gelu / kernels.ops.geglu after fc, whose backward also packs fc's weight-gradient operand
        # when fc is fst (eager: a hand-off between the layers; compiled: one custom op)
        a = fst_act(self.fc, x, self.kind, self.approximate)
        return self.drop(self.proj(a))


class GPT2Block(nn.Module):
    """x + attn(ln_1(x)), then + mlp(ln_2(x))."""

    def __init__(
        self,
        cfg: GPT2Config,
        linear_factory: LinearFactory | None = None,
        attn_linear_factory: LinearFactory | None = None,
    ) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg, attn_linear_factory)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.mlp = GPT2MLP(cfg, linear_factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


@torch.no_grad()
def _init_block(blk: GPT2Block, n_layer: int) -> None:
    resid_std = INIT_STD / math.sqrt(2 * n_layer)
    _init_linear(blk.attn.c_attn, INIT_STD)
    _init_linear(blk.attn.c_proj, resid_std)
    _init_linear(blk.mlp.fc, INIT_STD)
    _init_linear(blk.mlp.proj, resid_std)
    for ln in (blk.ln_1, blk.ln_2):
        ln.reset_parameters()


class GPT2Model(nn.Module):
    """tokens [B, T] (int) -> logits [B, T, vocab_size]; ``loss`` is next-token cross entropy."""

    def __init__(
        self,
        cfg: GPT2Config,
        linear_factory: LinearFactory | None = None,
        attn_linear_factory: LinearFactory | None = None,
    ) -> None:
        super().__init__()
        cfg = _as_config(cfg)
        self.cfg = cfg
        ffn_factory = resolve_linear_factory(cfg, linear_factory)
        if attn_linear_factory is not None and not callable(attn_linear_factory):
            raise TypeError(f"attn_linear_factory must be callable, got {type(attn_linear_factory).__name__}")
        self.wte = nn.Embedding(cfg.padded_vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(GPT2Block(cfg, ffn_factory, attn_linear_factory) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.d_model, cfg.padded_vocab, bias=False)
        self.reset_parameters()
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 initialisation (see the module docstring)."""
        self.wte.weight.normal_(0.0, INIT_STD)
        self.wpe.weight.normal_(0.0, INIT_STD)
        for blk in self.h:
            _init_block(blk, self.cfg.n_layer)
        self.ln_f.reset_parameters()
        if not self.cfg.tie_embeddings:
            self.lm_head.weight.normal_(0.0, INIT_STD)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be an integer tensor, got {tokens.dtype}")
        t = tokens.shape[1]
        if t > self.cfg.seq_len:
            raise ValueError(f"sequence length {t} exceeds the model's seq_len={self.cfg.seq_len}")
        pos = torch.arange(t, device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(pos))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return logits[..., : self.cfg.vocab_size] if self.cfg.padded_vocab != self.cfg.vocab_size else logits

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Mean cross entropy (float32): of ``targets`` if given, else of tokens[:, 1:] from tokens[:, :-1]."""
        if targets is None:
            if tokens.dim() != 2 or tokens.shape[1] < 2:
                raise ValueError(f"loss needs tokens [batch, seq] with seq >= 2, got shape {tuple(tokens.shape)}")
            tokens, targets = tokens[:, :-1], tokens[:, 1:]
        elif targets.shape != tokens.shape:
            raise ValueError(f"targets shape {tuple(targets.shape)} != tokens shape {tuple(tokens.shape)}")
        logits = self(tokens)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    def num_parameters(self) -> int:
        """Parameters, the tied embedding counted once."""
        return sum(p.numel() for p in self.parameters())


def build_gpt2(
    cfg: GPT2Config | str,
    linear_factory: LinearFactory | None = None,
    attn_linear_factory: LinearFactory | None = None,
    *,
    device: torch.device | str | None = None,
) -> GPT2Model:
    """A GPT-2 model (by config or name); FFN linears from ``linear_factory`` or ``cfg.ffn_mode``."""
    model = GPT2Model(_as_config(cfg), linear_factory, attn_linear_factory)
    return model if device is None else model.to(device)


def block(
    cfg: GPT2Config | str,
    linear_factory: LinearFactory | None = None,
    attn_linear_factory: LinearFactory | None = None,
) -> GPT2Block:
    """One initialised block, built as inside ``build_gpt2`` (to time a block in isolation)."""
    cfg = _as_config(cfg)
    blk = GPT2Block(cfg, resolve_linear_factory(cfg, linear_factory), attn_linear_factory)
    _init_block(blk, cfg.n_layer)
    return blk


def mlp(cfg: GPT2Config | str, linear_factory: LinearFactory | None = None) -> GPT2MLP:
    """One initialised FFN, built as inside ``build_gpt2`` (to time an FFN in isolation)."""
    cfg = _as_config(cfg)
    m = GPT2MLP(cfg, resolve_linear_factory(cfg, linear_factory))
    _init_linear(m.fc, INIT_STD)
    _init_linear(m.proj, INIT_STD / math.sqrt(2 * cfg.n_layer))
    return m


def ffn_linears(model: nn.Module) -> list[nn.Module]:
    """[fc, proj] of every GPT2MLP in ``model`` (a model, a block or an MLP), in module order."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    out: list[nn.Module] = []
    for m in model.modules():
        if isinstance(m, GPT2MLP):
            out.extend((m.fc, m.proj))
    return out


def param_count(cfg: GPT2Config | str) -> int:
    """Parameters of ``build_gpt2(cfg)`` with nn.Linear layers (padded vocab; tied embedding counted once)."""
    cfg = _as_config(cfg)
    d, b = cfg.d_model, int(cfg.bias)
    ln = d * (1 + b)
    attn = 4 * d * d + b * 4 * d
    ffn = d * cfg.fc_out + cfg.ffn_hidden * d + b * (cfg.fc_out + d)
    per_block = attn + ffn + 2 * ln
    embed = cfg.padded_vocab * d * (1 if cfg.tie_embeddings else 2) + cfg.seq_len * d
    return embed + cfg.n_layer * per_block + ln


def train_flops_per_token(cfg: GPT2Config | str, seq_len: int | None = None, causal: bool = True) -> float:
    """Training FLOPs per token (forward + backward = 3x forward), the usual MFU accounting.

    6 * (matmul weights: attention, FFN as built, i.e. halved for ``half``, and the output
    projection over the padded vocab, the GEMM actually run) plus 12 * n_layer * d * seq_len for
    the attention products, halved when ``causal``. 2:4 modes are counted at their dense FLOPs.
    """
    cfg = _as_config(cfg)
    t = cfg.seq_len if seq_len is None else seq_len
    d = cfg.d_model
    per_block = 4 * d * d + d * cfg.fc_out + cfg.ffn_hidden * d
    dense = 6 * (cfg.n_layer * per_block + cfg.padded_vocab * d)
    attn = 12 * cfg.n_layer * d * t
    return float(dense + (attn / 2 if causal else attn))
