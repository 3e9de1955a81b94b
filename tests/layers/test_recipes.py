"""STEP and Bi-Mask layers (``kernels.layers.recipes``): masks are 2:4 where they must be, forward and
backward equal a dense reference with the masks applied, STEP's optimizer freezes v at the switch."""

from __future__ import annotations

import pytest
import torch

from kernels.layers.recipes import (
    AutoSwitch,
    BiMaskLinear,
    StepAdamW,
    StepLinear,
    bimask_backward_mask,
    nm_magnitude_mask,
)


def _groups_at_most(mask: torch.Tensor, n: int, m: int, dim: int) -> bool:
    g = mask.movedim(dim, -1)
    return bool((g.reshape(*g.shape[:-1], -1, m).sum(-1) <= n).all())


def test_bimask_masks_are_2_4():
    torch.manual_seed(0)
    layer = BiMaskLinear(16, 12, perm_trials=8)
    fwd, bwd, perm = layer.mask, layer.bwd_mask, layer.perm
    assert _groups_at_most(fwd, 2, 4, 1) and bool((fwd.reshape(12, 4, 4).sum(-1) == 2).all())
    assert _groups_at_most(bwd[perm], 2, 4, 0)  # 2:4 along the output in the permuted order
    assert bool((bwd <= fwd).all())  # the backward keeps only forward-kept weights
    assert sorted(perm.tolist()) == list(range(12))


def test_bimask_permutation_search_never_worse_than_identity():
    torch.manual_seed(1)
    layer = BiMaskLinear(32, 32, perm_trials=16)
    w = layer.weight.detach()
    fwd = nm_magnitude_mask(w)
    ident = int(bimask_backward_mask(w, fwd, torch.arange(32)).sum())
    layer.search_permutation(5)
    assert int(layer.bwd_mask.sum()) >= ident


@pytest.mark.parametrize("bias", [True, False])
def test_bimask_forward_backward_match_masked_dense_reference(bias):
    torch.manual_seed(2)
    layer = BiMaskLinear(16, 8, bias=bias, perm_trials=4, decay=0.01)
    x = torch.randn(3, 5, 16, requires_grad=True)
    fwd, bwd = layer.mask, layer.bwd_mask
    y = layer(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    w = layer.weight.detach()
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w * fwd, layer.bias))
    torch.testing.assert_close(x.grad, dy @ (w * bwd))
    dw = dy.reshape(-1, 8).t() @ x.detach().reshape(-1, 16) + 0.01 * w * ~fwd
    torch.testing.assert_close(layer.weight.grad, dw)
    if bias:
        torch.testing.assert_close(layer.bias.grad, dy.reshape(-1, 8).sum(0))


def test_step_layer_dense_then_masked_ste():
    torch.manual_seed(3)
    layer = StepLinear(16, 8, decay=0.0)
    x = torch.randn(4, 16, requires_grad=True)
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    layer.switch()
    m = layer.mask
    assert bool((m.reshape(8, 4, 4).sum(-1) == 2).all())
    y = layer(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    w = layer.weight.detach()
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w * m, layer.bias))
    torch.testing.assert_close(x.grad, dy @ (w * m))
    torch.testing.assert_close(layer.weight.grad, dy.t() @ x.detach())  # straight-through


def test_step_adamw_is_adamw_then_freezes_variance():
    torch.manual_seed(4)
    a, b = StepLinear(8, 4), StepLinear(8, 4)
    b.load_state_dict(a.state_dict())
    opt_a = torch.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=0.1)
    opt_b = StepAdamW(b.parameters(), layers=[b], total_steps=10, switch_at=3, lr=1e-2, weight_decay=0.1)
    xs = [torch.randn(5, 8) for _ in range(5)]
    for i, x in enumerate(xs):
        for layer, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            layer(x).square().sum().backward()
            opt.step()
        if i < 3:
            torch.testing.assert_close(a.weight, b.weight)  # precondition phase: plain AdamW
    assert opt_b.switched_at == 3 and b.switched
    v = opt_b.state[b.weight]["exp_avg_sq"].clone()
    opt_b.zero_grad()
    b(xs[0]).square().sum().backward()
    opt_b.step()
    torch.testing.assert_close(opt_b.state[b.weight]["exp_avg_sq"], v)  # frozen
    # resume: a fresh optimizer loading the state dict is in the frozen phase and switches the layer
    c = StepLinear(8, 4)
    opt_c = StepAdamW(c.parameters(), layers=[c], total_steps=10, switch_at=3, lr=1e-2)
    opt_c.load_state_dict(opt_b.state_dict())
    assert opt_c.switched_at == 3 and c.switched


def test_autoswitch_rule():
    rule = AutoSwitch(t_min=4, t_max=20, window=2, eps=0.1)
    assert not rule.should_switch(3, [1.0] * 10)  # before t_min
    assert not rule.should_switch(6, [4.0, 4.0, 1.0, 1.0])  # still falling
    assert rule.should_switch(6, [1.0, 1.0, 1.02, 0.99])  # flat
    assert rule.should_switch(20, [])  # t_max


def test_state_round_trip():
    torch.manual_seed(5)
    a = BiMaskLinear(8, 8, perm_trials=4)
    a.search_permutation(7)
    a.after_optimizer_step(1, 10)
    b = BiMaskLinear(8, 8, perm_trials=4)
    b.load_state_dict(a.state_dict())
    b.load_sparse_state_dict(a.sparse_state_dict())
    assert torch.equal(a.perm, b.perm) and torch.equal(a.bwd_mask, b.bwd_mask)
    with pytest.raises(ValueError):
        StepLinear(8, 8).load_sparse_state_dict(a.sparse_state_dict())
