"""Llama-style decoder: configurations and parameter counts, shapes, causality, RoPE, training."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from repro.models import (
    CONFIGS,
    LlamaConfig,
    LlamaModel,
    block_linear_shapes,
    count_parameters,
    param_count,
    sparse_linear_count,
    sparse_linears,
    train_flops_per_token,
)
from repro.models.llama import RMSNorm, RotaryEmbedding, apply_rotary

TINY = CONFIGS["tiny"]


def tiny_model(seed: int = 0) -> LlamaModel:
    torch.manual_seed(seed)
    return LlamaModel(TINY)


# configurations -----------------------------------------------------------------------------


def test_map_neo_460m_assumption_count():
    cfg = CONFIGS["map-neo-460m"]
    n = param_count(cfg)
    assert n == 458_802_176
    assert abs(n - 458e6) / 458e6 < 0.02
    # per block: 4 h^2 + 3 h f + 2 h
    assert (n - 2 * cfg.vocab * cfg.hidden - cfg.hidden) // cfg.layers == 4 * 1024**2 + 3 * 1024 * 3072 + 2 * 1024


def test_llama2_13b_count():
    n = param_count(CONFIGS["llama2-13b"])
    assert abs(n - 13.0e9) / 13.0e9 < 0.03
    assert n == 13_015_864_320  # the published 13B checkpoint's count


def test_map_neo_7b_config():
    cfg = CONFIGS["map-neo-7b"]
    assert (cfg.hidden, cfg.ffn, cfg.layers, cfg.heads, cfg.vocab) == (3072, 24576, 28, 16, 64256)
    assert 7.0e9 < param_count(cfg) < 8.5e9


def test_param_count_matches_model():
    m = tiny_model()
    assert count_parameters(m) == param_count(TINY) == m.num_parameters()


def test_block_linear_shapes_and_count():
    cfg = CONFIGS["llama2-13b"]
    shapes = block_linear_shapes(cfg)
    assert shapes == [
        ("q", 5120, 5120),
        ("k", 5120, 5120),
        ("v", 5120, 5120),
        ("o", 5120, 5120),
        ("gate", 13824, 5120),
        ("up", 13824, 5120),
        ("down", 5120, 13824),
    ]
    assert sparse_linear_count(cfg) == 40 * (4 * 5120**2 + 3 * 5120 * 13824)


def test_sparse_linears_match_shapes():
    m = tiny_model()
    lin = sparse_linears(m)
    assert len(lin) == 7 * TINY.layers
    shapes = block_linear_shapes(TINY)
    for i in range(TINY.layers):
        for name, out_f, in_f in shapes:
            part = "attn" if name in ("q", "k", "v", "o") else "ffn"
            layer = lin[f"layers.{i}.{part}.{name}"]
            assert layer.weight.shape == (out_f, in_f)
            assert layer.bias is None
    assert sum(x.weight.numel() for x in lin.values()) == sparse_linear_count(TINY)
    assert m.lm_head not in lin.values()


def test_train_flops_per_token():
    cfg = TINY
    dense = 6 * (sparse_linear_count(cfg) + cfg.vocab * cfg.hidden)
    assert train_flops_per_token(cfg, causal=False) == dense + 12 * cfg.layers * cfg.hidden * cfg.seq_len
    assert train_flops_per_token(cfg) < train_flops_per_token(cfg, causal=False)


@pytest.mark.parametrize(
    "kw, what",
    [
        (dict(hidden=65, heads=4), "divisible by heads"),
        (dict(hidden=12, heads=4), "even"),
        (dict(layers=0), "layers"),
        (dict(vocab=-1), "vocab"),
        (dict(norm_eps=0.0), "norm_eps"),
        (dict(seq_len=2.0), "seq_len"),
    ],
)
def test_config_validation(kw, what):
    with pytest.raises(ValueError, match=what):
        dataclasses.replace(TINY, **kw)


def test_config_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TINY.hidden = 8  # type: ignore[misc]


# forward ------------------------------------------------------------------------------------


def test_forward_shapes_and_init():
    m = tiny_model()
    tokens = torch.randint(0, TINY.vocab, (3, 17))
    logits = m(tokens)
    assert logits.shape == (3, 17, TINY.vocab)
    assert torch.isfinite(logits).all()
    w = torch.cat([x.weight.reshape(-1) for x in sparse_linears(m).values()])
    assert abs(w.std().item() - 0.02) < 0.002
    assert all((n.weight == 1).all() for n in m.modules() if isinstance(n, RMSNorm))
    loss = m.loss(tokens)
    assert loss.ndim == 0
    assert abs(loss.item() - math.log(TINY.vocab)) < 0.5  # near-uniform at init


def test_forward_rejects_bad_tokens():
    m = tiny_model()
    with pytest.raises(ValueError, match="seq_len"):
        m(torch.zeros(1, TINY.seq_len + 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        m(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        m(torch.zeros(1, 4))


def test_causal():
    m = tiny_model()
    tokens = torch.randint(0, TINY.vocab, (2, 24))
    changed = tokens.clone()
    changed[:, 15] = (changed[:, 15] + 1) % TINY.vocab
    with torch.no_grad():
        a, b = m(tokens), m(changed)
    torch.testing.assert_close(a[:, :15], b[:, :15], rtol=0, atol=1e-6)
    assert (a[:, 15:] - b[:, 15:]).abs().max() > 1e-4


def test_loss_is_next_token_cross_entropy():
    m = tiny_model()
    tokens = torch.randint(0, TINY.vocab, (2, 10))
    with torch.no_grad():
        logits = m(tokens)
        ref = F.cross_entropy(logits[:, :-1].reshape(-1, TINY.vocab), tokens[:, 1:].reshape(-1))
        torch.testing.assert_close(m.loss(tokens), ref)


def test_loss_decreases_adamw():
    m = tiny_model()
    torch.manual_seed(1)
    tokens = torch.randint(0, TINY.vocab, (4, 32))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    for _ in range(30):
        loss = m.loss(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# rotary embeddings and attention ------------------------------------------------------------


def test_rope_preserves_norm_and_is_relative():
    rope = RotaryEmbedding(16, 64)
    cos, sin = rope.tables(64, torch.device("cpu"))
    assert cos.dtype == torch.float32 and cos.shape == (64, 16)
    torch.manual_seed(0)
    q = torch.randn(16, dtype=torch.float64)
    k = torch.randn(16, dtype=torch.float64)

    def rot(x, p):
        return apply_rotary(x.float().view(1, 16), cos[p : p + 1], sin[p : p + 1]).double().view(16)

    assert torch.allclose(rot(q, 0), q, atol=1e-6)  # position 0 is the identity
    assert torch.allclose(rot(q, 37).norm(), q.norm(), rtol=1e-5)
    # <R_m q, R_n k> depends on m - n only
    d1 = rot(q, 10) @ rot(k, 3)
    d2 = rot(q, 50) @ rot(k, 43)
    assert torch.allclose(d1, d2, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(d1, rot(q, 10) @ rot(k, 4), rtol=1e-3)


def test_rope_matches_complex_rotation():
    rope = RotaryEmbedding(8, 16, theta=10000.0)
    cos, sin = rope.tables(16, torch.device("cpu"))
    x = torch.randn(2, 16, 8)
    y = apply_rotary(x, cos, sin)
    # rotate-half layout: pair (i, i + d/2) is rotated by angle p * theta^(-2i/d)
    z = torch.complex(x[..., :4].double(), x[..., 4:].double())
    ang = torch.arange(16, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(4, dtype=torch.float64) * 2 / 8)
    zr = z * torch.polar(torch.ones_like(ang), ang)
    ref = torch.cat([zr.real, zr.imag], dim=-1)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_rope_tables_survive_dtype_cast():
    m = tiny_model().to(torch.bfloat16)
    cos, _ = m.rope.tables(TINY.seq_len, torch.device("cpu"))
    assert cos.dtype == torch.float32
    logits = m(torch.randint(0, TINY.vocab, (1, 8)))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()


def test_attention_matches_explicit_softmax():
    m = tiny_model()
    attn = m.layers[0].attn
    torch.manual_seed(3)
    x = torch.randn(2, 12, TINY.hidden)
    cos, sin = m.rope.tables(12, x.device)
    with torch.no_grad():
        out = attn(x, cos, sin)
        b, t, h, d = 2, 12, TINY.heads, TINY.head_dim
        q = apply_rotary(attn.q(x).view(b, t, h, d).transpose(1, 2), cos, sin)
        k = apply_rotary(attn.k(x).view(b, t, h, d).transpose(1, 2), cos, sin)
        v = attn.v(x).view(b, t, h, d).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h * d)
        ref = attn.o(y)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_rmsnorm():
    n = RMSNorm(8, eps=1e-5)
    with torch.no_grad():
        n.weight.copy_(torch.arange(8.0))
    x = torch.randn(3, 8)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * torch.arange(8.0)
    torch.testing.assert_close(n(x), ref)


def test_config_is_dataclass_with_defaults():
    cfg = LlamaConfig(hidden=32, ffn=64, layers=1, heads=2, vocab=10)
    assert cfg.seq_len == 2048 and cfg.norm_eps == 1e-5 and cfg.head_dim == 16
