"""MaskedTrainer: exact sparsity, regeneration schedule, flip rates, errors, timing (CPU, tiny model)."""

from __future__ import annotations

import math

import pytest
import torch

from repro.masked_training import MaskedTrainer, per_tensor_magnitude_mask, time_training_steps
from repro.models import CONFIGS, LlamaModel, sparse_linears

TINY = CONFIGS["tiny"]


def make(every: int, mask_fn=None, lr: float = 3e-3, seed: int = 0):
    torch.manual_seed(seed)
    model = LlamaModel(TINY)
    lin = sparse_linears(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    trainer = MaskedTrainer(model, lin, mask_fn or per_tensor_magnitude_mask(0.5), every, opt)
    tokens = torch.randint(0, TINY.vocab, (4, 32), generator=torch.Generator().manual_seed(seed + 1))
    return trainer, tokens


class Counting:
    """Keep top 50% |w| per tensor, plus a random perturbation so masks actually change."""

    def __init__(self, noise: float = 0.0):
        self.calls = 0
        self.noise = noise
        self.gen = torch.Generator().manual_seed(7)

    def __call__(self, weights):
        self.calls += 1
        out = []
        for w in weights:
            score = w.abs() + self.noise * torch.rand(w.shape, generator=self.gen)
            k = w.numel() // 2
            thr = score.reshape(-1).kthvalue(w.numel() - k).values
            out.append(score > thr)
        return out


def test_weights_exactly_sparse_after_every_step():
    trainer, tokens = make(every=3, mask_fn=Counting(noise=0.05))
    for _ in range(8):
        trainer.step(tokens)
        for name, m, lin in zip(trainer.names, trainer.masks, trainer.linears.values(), strict=True):
            assert m.dtype == torch.bool and m.shape == lin.weight.shape
            assert (lin.weight[~m] == 0).all(), name
            assert 0.45 < m.float().mean().item() < 0.55
    # dense parameters are untouched by masking
    assert (trainer.model.lm_head.weight != 0).float().mean() > 0.99


@pytest.mark.parametrize("every", [1, 3, 5])
def test_regeneration_schedule(every):
    fn = Counting()
    trainer, tokens = make(every=every, mask_fn=fn)
    n = 11
    for _ in range(n):
        trainer.step(tokens)
    expected = list(range(0, n, every))
    assert trainer.regeneration_steps == expected
    assert fn.calls == len(expected)
    assert trainer.step_index == n
    assert len(trainer.mask_times_ms) == len(expected)
    assert trainer.mask_time_ms >= 0
    rates = trainer.flip_rates
    assert len(rates) == len(expected) - 1
    assert all(0.0 <= r <= 1.0 for r in rates)


def test_flip_rate_counts_changed_entries():
    state = {"i": 0}

    def alternating(weights):
        state["i"] += 1
        out = []
        for w in weights:
            m = torch.zeros(w.shape, dtype=torch.bool)
            m.view(-1)[state["i"] % 2 :: 2] = True  # complementary masks on alternate calls
            out.append(m)
        return out

    trainer, tokens = make(every=1, mask_fn=alternating)
    for _ in range(3):
        trainer.step(tokens)
    assert trainer.flip_rates == [1.0, 1.0]

    fn = Counting(noise=0.05)
    trainer, tokens = make(every=1, mask_fn=fn)
    for _ in range(4):
        trainer.step(tokens)
    rates = trainer.flip_rates
    assert len(rates) == 3 and all(0.0 < r < 0.5 for r in rates), rates


def test_flip_rate_with_a_mask_fn_that_reuses_its_outputs():
    """A mask function may overwrite the tensors it returned before (FAST's FlexMasker does): the
    trainer copies the masks into its own buffers, so flip rates and the applied masks stay right."""
    held: list[torch.Tensor] = []
    state = {"i": 0}

    def reusing(weights):
        if not held:
            held.extend(torch.empty(w.shape, dtype=torch.bool) for w in weights)
        state["i"] += 1
        for m in held:  # complementary masks on alternate calls, written into the same tensors
            m.view(-1).zero_()
            m.view(-1)[state["i"] % 2 :: 2] = True
        return list(held)

    trainer, tokens = make(every=1, mask_fn=reusing)
    for _ in range(3):
        trainer.step(tokens)
        for m, h, lin in zip(trainer.masks, held, trainer.linears.values(), strict=True):
            assert torch.equal(m, h) and m.data_ptr() != h.data_ptr()  # a copy, in the trainer's buffer
            assert (lin.weight[~m] == 0).all()
    assert trainer.flip_rates == [1.0, 1.0]


def test_flip_rate_equals_per_mask_count():
    """The one compare of the two flat buffers counts what a compare a mask counts."""
    fn = Counting(noise=0.05)
    trainer, tokens = make(every=1, mask_fn=fn)
    trainer.step(tokens)
    before = [m.clone() for m in trainer.masks]
    trainer.step(tokens)
    changed = sum(int((a != b).sum()) for a, b in zip(before, trainer.masks, strict=True))
    assert trainer.flip_rates == [changed / sum(m.numel() for m in before)]


def test_manual_regenerate():
    trainer, _ = make(every=2)
    assert trainer.masks is None
    trainer.regenerate()
    assert trainer.regeneration_steps == [0]
    for m, lin in zip(trainer.masks, trainer.linears.values(), strict=True):
        assert (lin.weight[~m] == 0).all()


def test_every_must_be_positive():
    torch.manual_seed(0)
    model = LlamaModel(TINY)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="every"):
            MaskedTrainer(model, sparse_linears(model), per_tensor_magnitude_mask(0.5), bad, opt)
    with pytest.raises(ValueError, match="empty"):
        MaskedTrainer(model, {}, per_tensor_magnitude_mask(0.5), 1, opt)


def _break(i_bad: int, how: str):
    def fn(weights):
        masks = per_tensor_magnitude_mask(0.5)(weights)
        if how == "shape":
            masks[i_bad] = masks[i_bad].t().contiguous()
        elif how == "dtype":
            masks[i_bad] = masks[i_bad].float()
        elif how == "count":
            masks = masks[:-1]
        elif how == "type":
            masks[i_bad] = masks[i_bad].tolist()
        return masks

    return fn


@pytest.mark.parametrize("how, what", [("shape", "shape"), ("dtype", "dtype"), ("type", "not a tensor")])
def test_bad_masks_name_the_linear(how, what):
    trainer, tokens = make(every=1)
    i_bad = 4  # layers.0.ffn.gate: [ffn, hidden], its transpose has a different shape
    trainer.mask_fn = _break(i_bad, how)
    with pytest.raises(ValueError, match=what) as e:
        trainer.step(tokens)
    assert repr(trainer.names[i_bad]) in str(e.value)
    assert trainer.names[i_bad] == "layers.0.ffn.gate"


def test_wrong_mask_count():
    trainer, tokens = make(every=1, mask_fn=_break(0, "count"))
    with pytest.raises(ValueError, match="masks for"):
        trainer.step(tokens)


def test_loss_decreases_with_masking():
    trainer, tokens = make(every=5)
    losses = [trainer.step(tokens) for _ in range(30)]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.6 * losses[0], losses


def test_time_training_steps_cpu(capsys):
    trainer, tokens = make(every=2)
    r = time_training_steps(trainer, tokens, steps=6, warmup=2)
    assert r["timer"] == "cpu-perf_counter" and r["steps"] == 6 and r["warmup"] == 2
    assert 0 < r["ms_per_step_min"] <= r["ms_per_step"] <= r["ms_per_step_max"]
    assert r["ms_per_step"] < 10_000
    assert r["regenerations"] == 3  # steps 2, 4, 6
    assert 0 <= r["mask_share"] < 1 and r["mask_ms_per_step"] >= 0
    assert r["tokens_per_step"] == tokens.numel() and r["tokens_per_s"] > 0
    assert math.isfinite(r["loss_first"]) and math.isfinite(r["loss_last"])
    assert trainer.step_index == 8
    assert capsys.readouterr().err == ""  # short runs print no progress

    r = time_training_steps(trainer, tokens, steps=20, warmup=0, progress_every=10)
    err = capsys.readouterr().err
    assert "[train] step 10/20" in err and "[train] step 20/20" in err
    assert r["loss_last"] < r["loss_first"]


def test_time_training_steps_validation():
    trainer, tokens = make(every=1)
    with pytest.raises(ValueError, match="steps"):
        time_training_steps(trainer, tokens, steps=0, warmup=0)
    with pytest.raises(ValueError, match="warmup"):
        time_training_steps(trainer, tokens, steps=1, warmup=-1)
