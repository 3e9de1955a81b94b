"""Precision of the exhaustive transposable 2:4 search (issue 21, item 15): float32 scores cannot
overflow, tiles where float32 rounding could drop an entry are rescored in float64 (the optimum,
as the reference finds it), and every other tile is within the documented tolerance."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.transposable import (
    as_tiles,
    exhaustive_triton,
    is_transposable_24,
    tile_scores,
    transposable_mask,
    transposable_mask_reference,
)

TOL = 4e-7  # the documented bound of the float32 search: kept >= (1 - 4e-7) * optimum per tile
F32_MAX = torch.finfo(torch.float32).max


def best(w: torch.Tensor) -> torch.Tensor:
    """Optimal kept |w| per tile (float64 over all 90 patterns), [R/4 * C/4]."""
    return tile_scores(w.double()).amax(-1).flatten()


def kept(w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return as_tiles(w.double().abs() * mask).sum(-1).flatten()


def optimal(got: torch.Tensor, opt: torch.Tensor) -> bool:
    """Equal to the optimum up to float64 summation order (far below float32's resolution)."""
    return bool((got >= opt * (1 - 1e-13)).all())


def test_small_entry_beside_a_large_one_is_kept():
    """1 beside 1e8: float32 sums absorb the 1; the optimum keeps it (1e8 + 1)."""
    w = torch.zeros(4, 4)
    w[3, 2] = 1
    w[3, 3] = 1e8
    m = transposable_mask(w)
    assert is_transposable_24(m)
    assert bool(m[3, 2]) and bool(m[3, 3])
    assert kept(w, m).item() == 1e8 + 1 == best(w).item()
    # the float32 search alone is within its documented tolerance, not exact
    fast = transposable_mask(w, check_finite=False)
    assert kept(w, fast).item() >= (1 - TOL) * best(w).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_absorbed_entries_in_every_dtype(dtype):
    big = 6e4 if dtype == torch.float16 else 1e8
    g = torch.Generator().manual_seed(0)
    w = torch.randn(32, 48, generator=g)
    w[::4, ::4] = big  # one large entry per tile, the rest up to ~3e-5 of it (fp16) or 4e-8
    w = w.to(dtype)
    m = transposable_mask(w)
    assert is_transposable_24(m)
    assert optimal(kept(w, m), best(w))
    assert torch.equal(m, transposable_mask_reference(w))  # rescored tiles are the reference's


@pytest.mark.parametrize("check_finite", [True, False])
@pytest.mark.parametrize("scale", [1e38, 3e37, 1.0])
def test_huge_weights_do_not_overflow(scale, check_finite):
    """|w| near 1e38: sums of 8 overflowed float32 and the search kept ~65-75% of the optimum."""
    torch.manual_seed(1)
    w = torch.randn(64, 64).clamp(-3.4, 3.4) * scale
    assert bool(torch.isfinite(w).all())
    m = transposable_mask(w, check_finite=check_finite)
    assert is_transposable_24(m)
    got, opt = kept(w, m), best(w)
    assert bool((got >= (1 - TOL) * opt).all()), (got / opt).min()
    assert abs(got.sum() / opt.sum() - 1) < 1e-9


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_largest_finite_values(dtype):
    top = torch.finfo(dtype).max
    g = torch.Generator().manual_seed(2)
    w = (torch.rand(16, 16, generator=g, dtype=torch.float64) * top).to(dtype)
    w[:4, :4] = top  # a whole tile at the maximum: every pattern sums to 8 * max
    for check_finite in (True, False):
        m = transposable_mask(w, check_finite=check_finite)
        got, opt = kept(w, m), best(w)
        assert bool((got >= (1 - TOL) * opt).all()), (got / opt).min()


def test_kernel_scores_do_not_overflow():
    """The kernel itself (no scan): finite scores at float32's maximum."""
    g = torch.Generator().manual_seed(4)
    w = F32_MAX * (0.5 + 0.5 * torch.rand(32, 32, generator=g, dtype=torch.float64)).float()
    w[:4, :4] = F32_MAX
    m = exhaustive_triton(w)
    got, opt = kept(w, m), best(w)
    assert bool((got >= (1 - TOL) * opt).all()), (got / opt).min()


def test_tiny_tiles_are_rescored():
    """Tiles below 2**-100 reach float32's subnormal range once scaled: rescored in float64."""
    torch.manual_seed(3)
    w = torch.randn(16, 16) * 1e-36
    w[4:8] *= 1e-3  # subnormal magnitudes
    m = transposable_mask(w)
    assert optimal(kept(w, m), best(w))


@pytest.mark.parametrize("seed", range(4))
def test_wide_dynamic_range_meets_the_bound(seed):
    """Magnitudes spread over 20 decades: flagged tiles are exact, the rest within the bound."""
    g = torch.Generator().manual_seed(seed)
    w = 10 ** (20 * torch.rand(64, 64, generator=g, dtype=torch.float64) - 10)
    w = (w * torch.randn(64, 64, generator=g, dtype=torch.float64).sign()).float()
    opt = best(w)
    checked = kept(w, transposable_mask(w))
    fast = kept(w, transposable_mask(w, check_finite=False))
    assert bool((fast >= (1 - TOL) * opt).all())
    assert bool((checked >= (1 - TOL) * opt).all())
    # where some entry is <= 2**-18 of its tile's max, the checked result is the optimum
    t = as_tiles(w.double().abs()).flatten(0, 1)
    flagged = ((t > 0) & (t <= t.amax(-1, keepdim=True) * 2.0**-18)).any(-1)
    assert bool(flagged.any())
    assert optimal(checked[flagged], opt[flagged])


def test_non_finite_still_refused_by_the_scan():
    for bad in (float("nan"), float("inf"), -float("inf")):
        w = torch.randn(8, 8)
        w[5, 6] = bad
        with pytest.raises(ValueError, match="NaN or Inf"):
            transposable_mask(w)


def test_non_contiguous_and_empty():
    w = torch.zeros(8, 16)
    w[1, 2], w[1, 3] = 1e8, 1.0
    m = transposable_mask(w.t())  # [16, 8] view
    assert optimal(kept(w.t(), m), best(w.t()))
    assert transposable_mask(torch.empty(0, 8)).shape == (0, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (8, 12), (20, 1028)])
def test_scan_flags_the_documented_tiles(dtype, shape):
    """The check kernel flags exactly the tiles of the rule (a nonzero |w| <= 2**-18 x the tile's
    max, or 0 < max < 2**-100) and nothing else; zeros and all-zero tiles are not flagged."""
    from kernels.ops.transposable import _scan_for_exact

    g = torch.Generator().manual_seed(sum(shape))
    decades = 8 if dtype == torch.float16 else 12  # fp16: 1e-4 .. 1e4
    w = 10 ** (decades * torch.rand(shape, generator=g, dtype=torch.float64) - decades / 2)
    w = w * (torch.rand(shape, generator=g, dtype=torch.float64) > 0.2)  # exact zeros
    w[:4, :4] = 0.0
    if shape[1] > 8 and dtype != torch.float16:
        w[:4, 4:8] = 1e-33
    w = w.to(dtype)
    t = as_tiles(w.float().abs())  # [R/4, C/4, 16]
    big = t.amax(-1)
    want = ((t > 0) & (t <= big[..., None] * 2.0**-18)).any(-1) | ((big > 0) & (big < 2.0**-100))
    got = _scan_for_exact(w)
    flags = torch.zeros_like(want)
    if got is not None:
        flags[got[:, 0], got[:, 1]] = True
    assert torch.equal(flags, want)
    assert not bool(flags[0, 0])
