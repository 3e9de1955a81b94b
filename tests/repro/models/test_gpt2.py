"""GPT-2 family: published parameter counts, shapes, causality, FFN variants and linear factories."""

from __future__ import annotations

import dataclasses
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from repro.models import CONFIGS as LLAMA_CONFIGS
from repro.models import GPT2_CONFIGS, LlamaModel, build_gpt2, ffn_linears, sparse_linears
from repro.models import gpt2 as g
from repro.models.gpt2 import (
    GPT2MLP,
    GPT2Block,
    GPT2Config,
    GPT2Model,
    block,
    get_config,
    mlp,
    param_count,
    train_flops_per_token,
)

TINY = g.CONFIGS["tiny"]


def tiny(seed: int = 0, **kw) -> GPT2Model:
    torch.manual_seed(seed)
    return build_gpt2(dataclasses.replace(TINY, **kw))


class RecordingFactory:
    """A linear factory that records every call (and builds nn.Linear)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bool]] = []
        self.made: list[nn.Module] = []

    def __call__(self, in_features: int, out_features: int, bias: bool = True) -> nn.Module:
        self.calls.append((in_features, out_features, bias))
        m = nn.Linear(in_features, out_features, bias=bias)
        self.made.append(m)
        return m


# configurations and counts -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, published",
    [
        ("gpt2-124m", 124_439_808),
        ("gpt2-350m", 354_823_168),
        ("gpt2-774m", 774_030_080),
        ("gpt2-1.5b", 1_557_611_200),
    ],
)
def test_published_parameter_counts(name, published):
    cfg = get_config(name)
    assert GPT2_CONFIGS[name] is cfg
    unpadded = dataclasses.replace(cfg, vocab_multiple=1)
    assert unpadded.padded_vocab == 50257
    assert param_count(unpadded) == published
    # padding adds (50304 - 50257) rows of the (tied) embedding only
    assert cfg.padded_vocab == 50304
    assert param_count(cfg) == published + (50304 - 50257) * cfg.d_model


def test_124m_model_count_matches_formula():
    m = build_gpt2(dataclasses.replace(get_config("gpt2-124m"), vocab_multiple=1))
    assert m.num_parameters() == 124_439_808
    assert m.lm_head.weight is m.wte.weight


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"ffn_mode": "half"},
        {"ffn": "geglu"},
        {"ffn": "swiglu", "ffn_mode": "half", "d_ff": 96},
        {"bias": False},
        {"tie_embeddings": False},
        {"vocab_size": 250},
    ],
)
def test_param_count_matches_model(kw):
    cfg = dataclasses.replace(TINY, **kw)
    assert build_gpt2(cfg).num_parameters() == param_count(cfg)


def test_unknown_config_name():
    with pytest.raises(ValueError, match="unknown GPT-2 config"):
        get_config("gpt2-7b")
    with pytest.raises(ValueError, match="unknown GPT-2 config"):
        build_gpt2("nope")
    with pytest.raises(TypeError, match="GPT2Config"):
        build_gpt2(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kw, what",
    [
        ({"d_model": 66, "n_head": 4}, "divisible by n_head"),
        ({"n_layer": 0}, "n_layer"),
        ({"vocab_size": -1}, "vocab_size"),
        ({"seq_len": 2.0}, "seq_len"),
        ({"ffn": "relu"}, "ffn"),
        ({"ffn_mode": "quarter"}, "ffn_mode"),
        ({"ffn_mode": "half", "d_ff": 7}, "even"),
        ({"dropout": 1.0}, "dropout"),
        ({"gelu_approximate": "erf"}, "gelu_approximate"),
    ],
)
def test_config_validation(kw, what):
    with pytest.raises(ValueError, match=what):
        dataclasses.replace(TINY, **kw)


def test_config_properties():
    cfg = get_config("gpt2-124m")
    assert (cfg.d_model, cfg.n_layer, cfg.n_head, cfg.seq_len, cfg.n_positions) == (768, 12, 12, 1024, 1024)
    assert cfg.ff_dim == cfg.ffn_hidden == cfg.fc_out == 3072
    half = dataclasses.replace(cfg, ffn_mode="half")
    assert half.ffn_hidden == 1536 and half.fc_out == 1536
    gated = dataclasses.replace(cfg, ffn="geglu")
    assert gated.ffn_hidden == 3072 and gated.fc_out == 6144
    # d_ff=None follows d_model through dataclasses.replace
    assert dataclasses.replace(cfg, d_model=1024, n_head=16).ff_dim == 4096
    assert (get_config("gpt2-350m").n_head, get_config("gpt2-774m").n_layer, get_config("gpt2-1.5b").d_model) == (
        16,
        36,
        1600,
    )


def test_train_flops_per_token():
    cfg = TINY
    d = cfg.d_model
    dense = 6 * (cfg.n_layer * (4 * d * d + 2 * d * 4 * d) + cfg.padded_vocab * d)
    assert train_flops_per_token(cfg, causal=False) == dense + 12 * cfg.n_layer * d * cfg.seq_len
    assert train_flops_per_token(cfg) < train_flops_per_token(cfg, causal=False)
    half = dataclasses.replace(cfg, ffn_mode="half")
    assert train_flops_per_token(cfg) - train_flops_per_token(half) == 6 * cfg.n_layer * 4 * d * d


# forward -------------------------------------------------------------------------------------


def test_forward_shapes_and_init():
    m = tiny()
    tokens = torch.randint(0, TINY.vocab_size, (3, 17))
    logits = m(tokens)
    assert logits.shape == (3, 17, TINY.vocab_size)
    assert torch.isfinite(logits).all()
    fc = torch.cat([lin.weight.reshape(-1) for lin in ffn_linears(m)[0::2]])
    assert abs(fc.std().item() - 0.02) < 0.003
    proj = m.h[0].mlp.proj.weight
    assert abs(proj.std().item() - 0.02 / math.sqrt(2 * TINY.n_layer)) < 0.003
    assert all((lin.bias == 0).all() for lin in ffn_linears(m))
    loss = m.loss(tokens)
    assert loss.ndim == 0 and loss.dtype == torch.float32
    assert abs(loss.item() - math.log(TINY.vocab_size)) < 0.5


def test_padded_vocab_logits_and_loss():
    m = tiny(vocab_size=250)  # padded to 256 rows, logits for 250
    assert m.wte.weight.shape[0] == 256
    tokens = torch.randint(0, 250, (2, 9))
    logits = m(tokens)
    assert logits.shape == (2, 9, 250)
    with torch.no_grad():
        ref = F.cross_entropy(logits[:, :-1].reshape(-1, 250), tokens[:, 1:].reshape(-1))
        torch.testing.assert_close(m.loss(tokens), ref)
        torch.testing.assert_close(m.loss(tokens[:, :-1], tokens[:, 1:]), ref)


def test_forward_rejects_bad_tokens():
    m = tiny()
    with pytest.raises(ValueError, match="seq_len"):
        m(torch.zeros(1, TINY.seq_len + 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        m(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        m(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="targets shape"):
        m.loss(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))


@pytest.mark.parametrize("ffn", ["gelu", "geglu", "swiglu"])
def test_causal(ffn):
    m = tiny(ffn=ffn)
    tokens = torch.randint(0, TINY.vocab_size, (2, 24))
    changed = tokens.clone()
    changed[:, 15] = (changed[:, 15] + 1) % TINY.vocab_size
    with torch.no_grad():
        a, b = m(tokens), m(changed)
    torch.testing.assert_close(a[:, :15], b[:, :15], rtol=0, atol=1e-6)
    assert (a[:, 15:] - b[:, 15:]).abs().max() > 1e-4


def test_attention_matches_explicit_softmax():
    m = tiny()
    attn = m.h[0].attn
    x = torch.randn(2, 12, TINY.d_model)
    with torch.no_grad():
        out = attn(x)
        b, t, h, d = 2, 12, TINY.n_head, TINY.head_dim
        q, k, v = attn.c_attn(x).split(TINY.d_model, dim=-1)
        q, k, v = (z.view(b, t, h, d).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
        ref = attn.c_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h * d))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


# FFN variants --------------------------------------------------------------------------------


def test_half_mode_halves_ffn_width():
    full, half = tiny(), tiny(ffn_mode="half")
    for fm, hm in zip(ffn_linears(full), ffn_linears(half), strict=True):
        assert fm.weight.numel() == 2 * hm.weight.numel()
    assert half.h[0].mlp.fc.out_features == TINY.ff_dim // 2 == half.h[0].mlp.proj.in_features
    # attention and embeddings are untouched
    assert half.h[0].attn.c_attn.weight.shape == full.h[0].attn.c_attn.weight.shape


@pytest.mark.parametrize("ffn", ["geglu", "swiglu"])
def test_gated_variants_match_reference(ffn):
    cfg = dataclasses.replace(TINY, ffn=ffn)
    torch.manual_seed(0)
    m = mlp(cfg)
    assert m.fc.out_features == 2 * cfg.ff_dim and m.proj.in_features == cfg.ff_dim
    x = torch.randn(2, 5, cfg.d_model, requires_grad=True)
    out = m(x)
    z = m.fc(x)
    gate, up = z.chunk(2, dim=-1)  # gate half first
    act = F.gelu(gate, approximate=cfg.gelu_approximate) if ffn == "geglu" else F.silu(gate)
    ref = m.proj(act * up)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    (g1,) = torch.autograd.grad(out.square().sum(), x)
    (g2,) = torch.autograd.grad(ref.square().sum(), x)
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("ffn", ["gelu", "geglu", "swiglu"])
def test_variants_train_step(ffn):
    m = tiny(ffn=ffn)
    tokens = torch.randint(0, TINY.vocab_size, (2, 16))
    loss = m.loss(tokens)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


# linear factories ----------------------------------------------------------------------------


def test_linear_factory_builds_exactly_the_ffn_linears():
    f = RecordingFactory()
    torch.manual_seed(0)
    m = build_gpt2(TINY, linear_factory=f)
    d, h = TINY.d_model, TINY.ff_dim
    assert f.calls == [(d, h, True), (h, d, True)] * TINY.n_layer
    assert [id(x) for x in ffn_linears(m)] == [id(x) for x in f.made]
    ffn_ids = {id(x) for x in f.made}
    others = [x for x in m.modules() if isinstance(x, nn.Linear) and id(x) not in ffn_ids]
    assert len(others) == 2 * TINY.n_layer + 1  # c_attn, c_proj per block, lm_head


def test_linear_factory_half_and_gated_shapes():
    f = RecordingFactory()
    build_gpt2(dataclasses.replace(TINY, ffn="swiglu", ffn_mode="half", bias=False), linear_factory=f)
    d, h = TINY.d_model, TINY.ff_dim // 2
    assert f.calls == [(d, 2 * h, False), (h, d, False)] * TINY.n_layer


def test_attn_linear_factory():
    f, a = RecordingFactory(), RecordingFactory()
    build_gpt2(TINY, linear_factory=f, attn_linear_factory=a)
    d = TINY.d_model
    assert a.calls == [(d, 3 * d, True), (d, d, True)] * TINY.n_layer
    assert len(f.calls) == 2 * TINY.n_layer


def test_factory_modules_get_gpt2_init():
    class MyLinear(nn.Module):  # not an nn.Linear: initialised through .weight / .bias
        def __init__(self, i: int, o: int, bias: bool = True) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.full((o, i), 5.0))
            self.bias = nn.Parameter(torch.full((o,), 5.0)) if bias else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.linear(x, self.weight, self.bias)

    torch.manual_seed(0)
    m = build_gpt2(TINY, linear_factory=MyLinear)
    lin = ffn_linears(m)
    assert all(isinstance(x, MyLinear) for x in lin)
    assert all((x.bias == 0).all() for x in lin)
    assert abs(torch.cat([x.weight.reshape(-1) for x in lin[0::2]]).std().item() - 0.02) < 0.003
    assert m(torch.randint(0, 256, (1, 8))).shape == (1, 8, 256)


def test_bad_factory():
    with pytest.raises(TypeError, match="callable"):
        build_gpt2(TINY, linear_factory=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not an nn.Module"):
        build_gpt2(TINY, linear_factory=lambda i, o, bias=True: torch.zeros(o, i))


def test_sparse_ffn_mode_uses_sparse_linear(monkeypatch):
    made = []

    class FakeSparseLinear(nn.Linear):
        def __init__(self, in_features: int, out_features: int, bias: bool = True, mode: str = "fst") -> None:
            super().__init__(in_features, out_features, bias=bias)
            self.mode = mode
            made.append(self)

    fake = types.ModuleType("kernels.layers.sparse_linear")
    fake.SparseLinear = FakeSparseLinear
    fake.MODES = ("fst", "srste", "weight24", "dense", "mvue")
    monkeypatch.setitem(sys.modules, "kernels.layers.sparse_linear", fake)
    m = build_gpt2(dataclasses.replace(TINY, ffn_mode="srste"))
    assert [id(x) for x in ffn_linears(m)] == [id(x) for x in made]
    assert all(x.mode == "srste" for x in made)
    # a mode this module does not know is accepted when kernels.layers.sparse_linear lists it
    assert dataclasses.replace(TINY, ffn_mode="mvue").ffn_mode == "mvue"
    with pytest.raises(ValueError, match="ffn_mode"):
        dataclasses.replace(TINY, ffn_mode="nonsense")


def test_sparse_ffn_mode_without_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "kernels.layers.sparse_linear", None)  # import of it fails
    with pytest.raises(ImportError, match=r"kernels\.layers\.sparse_linear"):
        build_gpt2(dataclasses.replace(TINY, ffn_mode="fst"))
    with pytest.raises(ValueError, match="ffn_mode"):
        dataclasses.replace(TINY, ffn_mode="nonsense")


# isolated block / FFN ------------------------------------------------------------------------


def test_block_and_mlp_in_isolation():
    blk = block("tiny")
    assert isinstance(blk, GPT2Block)
    x = torch.randn(2, 8, TINY.d_model)
    assert blk(x).shape == x.shape
    assert len(ffn_linears(blk)) == 2
    f = RecordingFactory()
    m = mlp(TINY, linear_factory=f)
    assert isinstance(m, GPT2MLP) and len(f.calls) == 2
    assert ffn_linears(m) == [m.fc, m.proj]
    assert m(x).shape == x.shape
    with pytest.raises(TypeError):
        ffn_linears("model")  # type: ignore[arg-type]


def test_loss_decreases():
    m = tiny()
    torch.manual_seed(1)
    tokens = torch.randint(0, TINY.vocab_size, (4, 32))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    for _ in range(30):
        loss = m.loss(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_config_frozen_and_default_is_124m():
    assert GPT2Config() == dataclasses.replace(get_config("gpt2-124m"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        TINY.d_model = 8  # type: ignore[misc]


# Llama: the same FFN-swap hook --------------------------------------------------------------


def test_llama_linear_factory_swaps_the_swiglu_linears():
    cfg = LLAMA_CONFIGS["tiny"]
    f = RecordingFactory()
    torch.manual_seed(0)
    m = LlamaModel(cfg, linear_factory=f)
    h, ff = cfg.hidden, cfg.ffn
    assert f.calls == [(h, ff, False), (h, ff, False), (ff, h, False)] * cfg.layers
    lin = sparse_linears(m)
    made = {id(x) for x in f.made}
    assert {id(lin[f"layers.{i}.ffn.{n}"]) for i in range(cfg.layers) for n in ("gate", "up", "down")} == made
    assert abs(torch.cat([x.weight.reshape(-1) for x in f.made]).std().item() - 0.02) < 0.003
    assert m(torch.randint(0, cfg.vocab, (1, 8))).shape == (1, 8, cfg.vocab)
    # default unchanged: same parameters from the same seed
    torch.manual_seed(0)
    a = LlamaModel(cfg)
    torch.manual_seed(0)
    b = LlamaModel(cfg, linear_factory=None)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
