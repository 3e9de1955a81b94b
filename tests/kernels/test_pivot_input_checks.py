"""Global Top-K pivot search (kernels.ops.pivot): bad densities, non-finite values, empty or
wrongly typed inputs, unknown methods and out-of-range options raise errors that name them."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.pivot import METHODS, find_pivot

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("method", METHODS)
def test_errors(method):
    x = torch.randn(100)
    for bad in (-0.1, 1.5, float("nan"), float("inf"), "0.5", None, True):
        with pytest.raises(ValueError, match="density"):
            find_pivot(x, bad, method)
    for v in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[17] = v
        with pytest.raises(ValueError, match="NaN or Inf"):
            find_pivot([torch.randn(3), y], 0.5, method)
    with pytest.raises(ValueError, match="empty"):
        find_pivot([], 0.5, method)
    with pytest.raises(ValueError, match="empty"):
        find_pivot([torch.empty(0), torch.empty(0, 3)], 0.5, method)
    for dt in (torch.float64, torch.int32, torch.bool):
        with pytest.raises(TypeError, match="dtype"):
            find_pivot(torch.zeros(4, dtype=dt), 0.5, method)
    with pytest.raises(TypeError):
        find_pivot([x, "w"], 0.5, method)
    with pytest.raises(TypeError, match="options"):
        find_pivot(x, 0.5, method, nonsense=1)


def test_bad_method_and_options():
    x = torch.randn(100)
    with pytest.raises(ValueError, match="unknown method"):
        find_pivot(x, 0.5, "sort")
    with pytest.raises(ValueError, match="bits"):
        find_pivot(x, 0.5, "radix", bits=0)
    with pytest.raises(ValueError, match="bits"):
        find_pivot(x, 0.5, "radix", bits=17)
    with pytest.raises(ValueError, match="bins"):
        find_pivot(x, 0.5, "gaussian", bins=1)
    with pytest.raises(ValueError, match="max_candidates"):
        find_pivot(x, 0.5, "gaussian", max_candidates=0)
    with pytest.raises(ValueError, match="margin"):
        find_pivot(x, 0.5, "gaussian", margin=-1.0)
    with pytest.raises(TypeError, match="options"):
        find_pivot(x, 0.5, "exact", bits=8)


@pytest.mark.parametrize("method", METHODS)
def test_non_tensor_input_refused(method):
    for bad in (3.0, "w", None):
        with pytest.raises(TypeError, match="a Tensor or a sequence of Tensors"):
            find_pivot(bad, 0.5, method)


@pytest.mark.parametrize("method, opts", [("radix", {}), ("radix", {"bits": 16}), ("gaussian", {})])
def test_radix_and_gaussian_refuse_nonfinite_without_the_scan(method, opts):
    """check_finite=False skips the up-front scan; radix (bits >= 8) and gaussian still detect
    NaN/Inf in their first step, as find_pivot_stats documents."""
    for v in (float("nan"), float("inf"), -float("inf")):
        y = torch.randn(1000, generator=torch.Generator().manual_seed(2))
        y[123] = v
        with pytest.raises(ValueError, match="NaN or Inf"):
            find_pivot([torch.randn(8), y], 0.5, method, check_finite=False, **opts)
