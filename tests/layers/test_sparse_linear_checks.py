"""SparseLinear refuses bad arguments with errors that name them: construction, forward inputs,
schedule calls."""

from __future__ import annotations

import pytest
import torch

from kernels import SparseLinear

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")


def test_bad_construction():
    with pytest.raises(ValueError, match="valid modes: fst, srste, weight24, dense"):
        SparseLinear(16, 16, mode="half")
    with pytest.raises(ValueError, match="in_features=30 is not divisible by 4"):
        SparseLinear(30, 16)
    with pytest.raises(ValueError, match="out_features=18 is not divisible by 4"):
        SparseLinear(32, 18, mode="weight24")
    with pytest.raises(ValueError, match="in_features=30"):
        SparseLinear(30, 16, mode="srste")
    SparseLinear(32, 18, mode="srste")  # SR-STE groups run along in only
    SparseLinear(30, 18, mode="dense")
    with pytest.raises(TypeError, match="in_features must be an int"):
        SparseLinear(16.0, 16)
    with pytest.raises(ValueError, match="mask_interval"):
        SparseLinear(16, 16, mask_interval=0)
    with pytest.raises(ValueError, match="decay"):
        SparseLinear(16, 16, decay=-1e-3)
    with pytest.raises(ValueError, match="decay"):
        SparseLinear(16, 16, decay=float("nan"))
    with pytest.raises(ValueError, match="dense_fraction"):
        SparseLinear(16, 16, dense_fraction=1.5)
    with pytest.raises(TypeError, match="track_flip"):
        SparseLinear(16, 16, track_flip=1)
    with pytest.raises(TypeError, match="weight dtype"):
        SparseLinear(16, 16, dtype=torch.float64)


def test_bad_forward_inputs(monkeypatch):
    layer = SparseLinear(16, 8, mode="fst")
    with pytest.raises(ValueError, match="in_features=16"):
        layer(torch.randn(4, 12))
    with pytest.raises(ValueError, match="in_features=16"):
        layer(torch.tensor(1.0))
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer([1.0] * 16)
    with pytest.raises(TypeError, match="dtype"):
        layer(torch.ones(4, 16, dtype=torch.int32))
    with pytest.raises(TypeError, match="dtype"):
        layer(torch.randn(4, 16, dtype=torch.float64))
    bad = torch.randn(4, 16)
    bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        layer(bad)
    inf = torch.randn(4, 16)
    inf[0, 0] = float("inf")
    with pytest.raises(ValueError, match="NaN or Inf"):
        layer(inf)
    # a NaN in the incoming gradient is refused too
    y = layer(torch.randn(4, 16))
    with pytest.raises(ValueError, match="grad_output"):
        y.backward(torch.full_like(y, float("nan")))
    # without checks nothing is scanned: the NaN propagates (visible, not hidden)
    fast = SparseLinear(16, 8, mode="fst", checks=False)
    assert torch.isnan(fast(bad)).any()


def test_bad_schedule_calls():
    layer = SparseLinear(16, 8, mode="fst")
    with pytest.raises(ValueError, match="step"):
        layer.after_optimizer_step(-1, 10)
    with pytest.raises(ValueError, match="total_steps"):
        layer.after_optimizer_step(1, 0)
    with pytest.raises(TypeError, match="step"):
        layer.after_optimizer_step(1.0, 10)
    with pytest.raises(TypeError, match="bool"):
        layer.set_dense(1)
    with pytest.raises(ValueError, match="no sparse phase"):
        SparseLinear(16, 8, mode="dense").set_dense(False)
    nan_w = SparseLinear(16, 8, mode="weight24")
    with torch.no_grad():
        nan_w.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        nan_w.after_optimizer_step(40, 100)
    with pytest.raises(ValueError, match="NaN"):
        nan_w(torch.randn(2, 16))
