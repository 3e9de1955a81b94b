"""SparseLinear as an ``nn.Linear`` drop-in: state dict and shapes, a sparse layer's state
round trip that resumes exactly, the backend it reports on the CPU, and checks as a per-layer
choice (no process-wide switch)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import kernels.layers.sparse_linear as sl_mod
from kernels import SparseLinear
from tests.helpers import assert_close_rel
from tests.layers.sparse_linear_helpers import SPARSE_MODES, layer_data, opt_mask, run_layer

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")


def test_drop_in_state_dict_and_shapes():
    torch.manual_seed(15)
    ref = nn.Linear(32, 16)
    torch.manual_seed(15)
    layer = SparseLinear(32, 16, mode="fst")
    assert isinstance(layer, nn.Linear)
    assert torch.equal(layer.weight, ref.weight)  # same initialisation as nn.Linear
    assert set(layer.state_dict()) == {"weight", "bias"}
    assert set(SparseLinear(32, 16, bias=False, mode="srste").state_dict()) == {"weight"}
    assert "mode='fst'" in repr(layer)
    # load an nn.Linear checkpoint, also through a parent module: the mask follows the weights
    other = nn.Linear(32, 16)
    seq = nn.Sequential(layer)
    seq.load_state_dict(nn.Sequential(other).state_dict())
    assert torch.equal(layer.weight, other.weight)
    assert torch.equal(layer.mask, opt_mask(other.weight))
    nn.Linear(32, 16).load_state_dict(layer.state_dict())
    # any leading shape, including none
    for shape in [(32,), (5, 32), (2, 3, 4, 32)]:
        x = torch.randn(shape)
        y = layer(x)
        assert y.shape == (*shape[:-1], 16)
        assert_close_rel(y, x.double() @ (layer.weight.double() * layer.mask).T + layer.bias.double(), 1e-6)
    # nn.init applied after construction (as GPT-2's _init_weights does): the first use sees it
    late = SparseLinear(16, 16, mode="weight24")
    nn.init.normal_(late.weight, std=0.02)
    assert torch.equal(late.mask, opt_mask(late.weight))


@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_sparse_state_round_trip_resumes_exactly(mode, plain_torch):
    """state_dict (nn.Linear's keys) + sparse_state_dict restore the run: same masks, same MVUE draws."""
    torch.manual_seed(25)
    a = SparseLinear(16, 16, mode=mode, mask_interval=3)
    x, dy = layer_data((8, 16), 16, seed=26)
    opt = torch.optim.SGD(a.parameters(), lr=0.5)
    for step in range(1, 6):
        opt.zero_grad()
        a(x).backward(dy)
        opt.step()
        a.after_optimizer_step(step, 100)
    b = SparseLinear(16, 16, mode=mode, mask_interval=3)
    b.load_state_dict(a.state_dict())
    b.load_sparse_state_dict(a.sparse_state_dict())
    assert torch.equal(b.mask, a.mask)
    for layer in (a, b):
        layer.weight.grad = layer.bias.grad = None
        layer.after_optimizer_step(6, 100)  # a refresh step
    assert torch.equal(b.mask, a.mask) and a.flip_rate == b.flip_rate
    ra, rb = run_layer(a, x, dy), run_layer(b, x, dy)
    for u, v in zip(ra, rb, strict=True):
        assert torch.equal(u, v)
    if a.flip_rate is not None:
        assert float(a.flip_rate_tensor) == pytest.approx(a.flip_rate)
    with pytest.raises(ValueError, match="mode"):
        SparseLinear(16, 16, mode="dense").load_sparse_state_dict(a.sparse_state_dict())
    bad = a.sparse_state_dict()
    bad["mask"] = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="shape"):
        b.load_sparse_state_dict(bad)


def test_backend_on_cpu_says_why_once():
    layer = SparseLinear(64, 64, mode="weight24")
    assert layer.backend == "dense" and "CUDA" in layer.fallback_reason
    with pytest.warns(UserWarning, match="dense fallback.*CUDA"):
        layer(torch.randn(64, 64))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(torch.randn(64, 64))  # only once per reason
    layer.use_cusparselt = False
    with pytest.warns(UserWarning, match="use_cusparselt is False"):
        layer(torch.randn(64, 64))
    assert layer.fallback_reason == "use_cusparselt is False"


def test_no_process_wide_switch():
    """Checks are a per-layer choice (``checks=False``): no module flag changes every layer."""
    assert not hasattr(sl_mod, "FAST_PATH")
    assert SparseLinear(16, 8, mode="fst", checks=False)._checks() is False
    assert SparseLinear(16, 8, mode="fst")._checks() is True
