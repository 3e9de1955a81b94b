import pytest
import torch

from kernels import nm_mask


@pytest.mark.parametrize("n,m", [(2, 4), (1, 4), (4, 8), (0, 4), (4, 4)])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_nm_mask_keeps_top_n(n, m, dim):
    w = torch.randn(8, 16, 8)
    mask = nm_mask(w, n, m, dim=dim)
    assert mask.shape == w.shape and mask.dtype == torch.bool
    x = w.abs().movedim(dim, -1)
    k = mask.movedim(dim, -1)
    g = x.reshape(*x.shape[:-1], -1, m)
    kg = k.reshape(g.shape)
    assert (kg.sum(-1) == n).all()
    if 0 < n < m:
        kept_min = torch.where(kg, g, torch.inf).amin(-1)
        dropped_max = torch.where(kg, -torch.inf, g).amax(-1)
        assert (kept_min >= dropped_max).all()


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((torch.randn(4, 6), 2, 4), ValueError, "not divisible"),
        ((torch.randn(4, 8), 5, 4), ValueError, "n <= m"),
        ((torch.randn(4, 8), 2, 0), ValueError, "m > 0"),
        ((torch.randn(4, 8), 2.0, 4), TypeError, "ints"),
        ((torch.full((4, 8), float("nan")), 2, 4), ValueError, "NaN"),
        ((torch.ones(4, 8, dtype=torch.int64), 2, 4), TypeError, "dtype"),
    ],
)
def test_nm_mask_bad_inputs(args, exc, match):
    with pytest.raises(exc, match=match):
        nm_mask(*args)


def test_nm_mask_bad_dim():
    with pytest.raises(ValueError, match="out of range"):
        nm_mask(torch.randn(4, 8), 2, 4, dim=2)
