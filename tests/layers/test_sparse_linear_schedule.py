"""SparseLinear masks over training: the refresh schedule and the switch to dense fine-tuning,
flip rates, SR-STE's per-forward mask, and the packed operands and decay terms that follow the
mask in place (cuSPARSELt path emulated on the CPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernels.layers.sparse_linear as sl_mod
from kernels import SparseLinear, nm_mask
from tests.helpers import assert_close_rel
from tests.layers.sparse_linear_helpers import layer_reference, opt_mask

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")


@pytest.mark.parametrize("mode", ["fst", "weight24"])
def test_schedule_refresh_and_dense_switch(mode, plain_torch):
    torch.manual_seed(11)
    total, interval = 12, 3  # dense_fraction 1/6: dense once step >= 10
    layer = SparseLinear(16, 16, mode=mode, mask_interval=interval)
    g = torch.Generator().manual_seed(12)
    in_use = layer.mask
    prev_cand = opt_mask(layer.weight)
    assert torch.equal(in_use, prev_cand)
    for step in range(1, total + 1):
        with torch.no_grad():
            layer.weight.add_(0.2 * torch.randn(16, 16, generator=g))  # big steps: masks change
        layer.after_optimizer_step(step, total)
        if step >= 10:
            assert layer.is_dense and layer.mask.all() and layer.flip_rate is None
            assert layer.backend == "dense" and "dense fine-tuning" in layer.fallback_reason
            x = torch.randn(3, 16)
            assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
            continue
        assert not layer.is_dense
        cand = opt_mask(layer.weight)
        if step % interval == 0:
            in_use = cand
        assert torch.equal(layer.mask, in_use), step
        expect_flip = (cand != prev_cand).double().mean().item()
        assert 0.0 < layer.flip_rate <= 1.0
        assert layer.flip_rate == pytest.approx(expect_flip, abs=1e-12)
        prev_cand = cand
    # the forward uses the mask in use
    layer.set_dense(False)
    assert not layer.is_dense and torch.equal(layer.mask, opt_mask(layer.weight))
    x = torch.randn(5, 16)
    assert_close_rel(layer(x), x.double() @ (layer.weight.double() * layer.mask).T + layer.bias.double(), 1e-6)


def test_flip_rate_zero_when_weights_unchanged_and_none_when_untracked(plain_torch):
    torch.manual_seed(13)
    layer = SparseLinear(16, 8, mode="fst", mask_interval=2)
    layer.after_optimizer_step(1, 100)
    assert layer.flip_rate == 0.0
    layer.after_optimizer_step(2, 100)
    assert layer.flip_rate == 0.0
    quiet = SparseLinear(16, 8, mode="weight24", mask_interval=2, track_flip=False)
    before = quiet.mask
    with torch.no_grad():
        quiet.weight.mul_(torch.rand(8, 16))  # reorder magnitudes
    quiet.after_optimizer_step(1, 100)
    assert quiet.flip_rate is None and torch.equal(quiet.mask, before)  # not a refresh step
    quiet.after_optimizer_step(2, 100)
    assert quiet.flip_rate is None and torch.equal(quiet.mask, opt_mask(quiet.weight))


def test_dense_switch_boundary_and_disabled(plain_torch):
    layer = SparseLinear(8, 8, mode="fst", mask_interval=1000)
    layer.after_optimizer_step(49, 60)
    assert not layer.is_dense
    layer.after_optimizer_step(50, 60)  # (1 - 1/6) * 60 = 50
    assert layer.is_dense
    layer.after_optimizer_step(51, 60)
    assert layer.is_dense  # stays dense
    never = SparseLinear(8, 8, mode="weight24", dense_fraction=0.0)
    never.after_optimizer_step(60, 60)
    assert not never.is_dense
    srste = SparseLinear(8, 8, mode="srste")
    srste.after_optimizer_step(60, 60)
    assert not srste.is_dense  # SR-STE has no dense phase of its own
    srste.set_dense(True)
    assert srste.is_dense and srste.mask.all()


def test_srste_mask_follows_weights_and_flip_rate():
    torch.manual_seed(14)
    layer = SparseLinear(16, 8, mode="srste")
    x = torch.randn(4, 16)
    layer(x)
    m0 = nm_mask(layer.weight.detach(), 2, 4, dim=1)
    layer.after_optimizer_step(1, 10)
    assert layer.flip_rate is None  # nothing to compare with yet
    with torch.no_grad():
        layer.weight.mul_(torch.rand(8, 16) + 0.5)
    y = layer(x)
    m1 = nm_mask(layer.weight.detach(), 2, 4, dim=1)
    assert not torch.equal(m0, m1)
    assert_close_rel(y, x.double() @ (layer.weight.double() * m1).T + layer.bias.double(), 1e-6)
    layer.after_optimizer_step(2, 10)
    assert layer.flip_rate == pytest.approx((m1 != m0).double().mean().item(), abs=1e-12)
    layer(x)
    layer.after_optimizer_step(3, 10)
    assert layer.flip_rate == 0.0


@pytest.mark.parametrize("mode", ["fst", "weight24"])
def test_packed_pair_follows_weights_and_masks_in_place(mode, emulated_cusparselt):
    """The pair packed on first use is rewritten in place: values from the new weights every
    forward (the mask unchanged), values and metadata when the mask changes (schedule refresh,
    set_dense(False), load_sparse_state_dict); outputs and dX always equal the reference with
    the mask in use."""
    torch.manual_seed(31)
    layer = SparseLinear(128, 64, mode=mode, mask_interval=2, decay=0.0, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(32)
    x = torch.randn(64, 128, generator=g).bfloat16()
    dy = torch.randn(64, 64, generator=g).bfloat16()

    def check() -> None:
        xg = x.clone().requires_grad_(True)
        y = layer(xg)
        assert layer.backend == "cusparselt"
        y.backward(dy)
        layer.weight.grad = layer.bias.grad = None
        ry, rdx, _, _ = layer_reference(layer, x.float(), dy.float(), layer.mask, 0)  # dW not compared
        assert_close_rel(y, ry, 1e-2)
        assert_close_rel(xg.grad, rdx, 1e-2)

    check()
    (pair,) = layer._pairs.values()
    ptrs = [t.data_ptr() for t in pair]
    masks = [layer.mask]
    for step in (1, 2, 3):
        with torch.no_grad():  # an optimizer step: new values, and at step 2 a new mask
            layer.weight.mul_(torch.rand(layer.weight.shape, generator=g).bfloat16() + 0.5)
        layer.after_optimizer_step(step, 10**6)
        masks.append(layer.mask)
        check()
        assert [t.data_ptr() for t in layer._pairs[next(iter(layer._pairs))]] == ptrs
    assert torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    state = layer.sparse_state_dict()
    layer.set_dense(True)
    assert layer._pairs == {}
    layer.set_dense(False)
    check()
    with torch.no_grad():
        layer.weight.mul_(-1.5)
    layer.load_sparse_state_dict(state)  # the mask of step 3, not the weights' own
    check()
    assert torch.equal(layer.mask, masks[-1])
    (pair,) = layer._pairs.values()  # packed afresh after the dense phase
    ptrs = [t.data_ptr() for t in pair]
    layer.after_optimizer_step(4, 10**6)
    check()
    assert [t.data_ptr() for t in layer._pairs[next(iter(layer._pairs))]] == ptrs  # repacked in place


@pytest.mark.parametrize("mode", ["fst", "weight24"])
def test_decay_from_pruned_entries_follows_the_mask(mode, emulated_cusparselt, monkeypatch):
    """On the graph-safe cuSPARSELt path the backward decays from the pruned entries that the
    forward's values refresh wrote: the gradient's decay term is alpha * W*(~M) (W rounded to
    bf16) with this step's W and M, also in the step right after a mask change."""
    g = torch.Generator().manual_seed(52)
    x = torch.randn(64, 128, generator=g).bfloat16()
    dy = torch.randn(64, 64, generator=g).bfloat16()

    def unused(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("decayed from the fp32 weight and the mask, not the pruned entries")

    monkeypatch.setattr(sl_mod, "masked_decay_cast_nocheck", unused)

    def run(decay: float) -> tuple[list, SparseLinear]:
        torch.manual_seed(53)
        layer = SparseLinear(128, 64, mode=mode, mask_interval=2, decay=decay, checks=False, seed=5)
        steps, gw = [], torch.Generator().manual_seed(54)
        for step in (1, 2, 3):
            w, m = layer.weight.detach().clone(), layer.mask.clone()
            with torch.autocast("cpu", torch.bfloat16):
                layer(x).backward(dy)
            steps.append((layer.weight.grad.clone(), w, m))
            layer.weight.grad = None
            with torch.no_grad():
                layer.weight.mul_(torch.rand(layer.weight.shape, generator=gw) + 0.5)  # new mask at step 2's refresh
            layer.after_optimizer_step(step, 10**6)
        return steps, layer

    with_decay, layer = run(0.25)
    without, _ = run(0.0)
    assert set(layer._pruned) == set(layer._pairs) and len(layer._pruned) == 1
    assert not torch.equal(with_decay[1][2], with_decay[2][2])  # the mask changed before step 3
    for (ga, w, m), (gb, _, _) in zip(with_decay, without, strict=True):
        assert_close_rel(ga - gb, 0.25 * torch.where(m, 0.0, w), 2e-3)
