"""FAST flex-SS mask generation: fused Triton kernels (interpreter) vs the PyTorch reference,
budgets of the three methods, unbiased density of the probabilistic choice, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from kernels._flex_triton import fast_mask_triton, has_fast_kernel
from kernels.flex import bracket, choose_configs, flex_mask, flex_mask_reference, mask_quality, tile_counts
from kernels.patterns import NM, TBS, Unstructured, Vegeta

KERNEL_PATTERNS = [TBS(4), TBS(8), Vegeta(4), Vegeta(8), NM(2, 4), NM(4, 8)]


def pivot_of(w: torch.Tensor, density: float) -> float:
    k = round(density * w.numel())
    return w.abs().float().flatten().topk(k).values[-1].item()


def density_for(pattern, d=0.37):
    return pattern.density(pattern.configs[0]) if len(pattern.configs) == 1 else d


@pytest.mark.parametrize("pattern", KERNEL_PATTERNS, ids=str)
def test_fast_kernel_equals_reference_fp32(pattern):
    assert has_fast_kernel(pattern)
    w = torch.randn(16, 256)
    d = density_for(pattern)
    piv = pivot_of(w, d)
    poisoned = fast_mask_triton(w, pattern, piv, seed=7)  # fresh output each call; check bytes
    assert (poisoned.view(torch.uint8) <= 1).all()
    ref = flex_mask_reference(w, pattern, d, "fast", 7, piv)
    assert torch.equal(poisoned, ref)
    pattern.validate(poisoned)


@pytest.mark.parametrize("pattern", [TBS(4), Vegeta(4)], ids=str)
def test_fast_kernel_bf16_same_configs_and_optimal(pattern):
    """bf16 has ties between layout sums: compare configurations and retained magnitude."""
    w = torch.randn(32, 128, dtype=torch.bfloat16)
    piv = pivot_of(w, 0.5)
    got = fast_mask_triton(w, pattern, piv, seed=3)
    ref = flex_mask_reference(w, pattern, 0.5, "fast", 3, piv)
    assert torch.equal(pattern.tile_configs(got), pattern.tile_configs(ref))
    mags = pattern.tiles(w.abs().double())
    kept = lambda m: (mags * pattern.tiles(m)).flatten(1).sum(1)  # noqa: E731
    assert torch.allclose(kept(got), kept(ref))


@pytest.mark.parametrize("pattern", [TBS(4), TBS(8), Vegeta(4)], ids=str)
@pytest.mark.parametrize("method", ["torch", "vegeta"])
def test_budget_methods_meet_the_target(pattern, method):
    w = torch.randn(64, 256)
    d = 0.43
    m = flex_mask(w, pattern, d, method=method, pivot=pivot_of(w, d))
    pattern.validate(m)
    gap = round(d * w.numel()) - int(m.sum())
    step = pattern.kept(max(pattern.configs))
    # largest remainder stays at or below the budget; nearest rounding + correction lands within a step
    assert (0 <= gap < step) if method == "torch" else (abs(gap) < step)


def test_bracket():
    lo, hi, p = bracket((0, 1, 2, 4), torch.tensor([0.0, 0.5, 1.0, 3.0, 4.0, 5.0]))
    assert lo.tolist() == [0, 0, 1, 2, 4, 4] and hi.tolist() == [0, 1, 1, 4, 4, 4]
    assert torch.allclose(p, torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0, 0.0]))


def _kept_counts(configs_fn, counts, pattern, seeds):
    return torch.tensor([float((configs_fn(s) * pattern.unit).sum()) for s in seeds])


@pytest.mark.parametrize("pattern", [TBS(4), Vegeta(4)], ids=str)
def test_fast_density_is_unbiased_and_the_test_has_power(pattern):
    """E[kept] = sum of the tiles' counts exactly; check the mean over seeds against a 5-sigma
    bound from the exact per-tile variance, and check a biased rule fails the same bound."""
    w = torch.randn(64, 256)
    piv = pivot_of(w, 0.41)
    _, counts = tile_counts(w, pattern, piv)
    lo, hi, p = bracket(pattern.configs, counts.float() / pattern.unit)
    var = float((((hi - lo) * pattern.unit).double() ** 2 * p.double() * (1 - p.double())).sum())
    target = float(counts.sum())
    seeds = range(400)
    kept = _kept_counts(lambda s: choose_configs("fast", pattern, counts, 0, seed=s), counts, pattern, seeds)
    bound = 5 * math.sqrt(var / len(seeds))
    assert abs(kept.double().mean().item() - target) <= bound
    biased = _kept_counts(lambda s: torch.where(p > 0.4, hi, lo), counts, pattern, seeds)  # deterministic rounding
    assert abs(biased.double().mean().item() - target) > bound


def test_density_error_shrinks_with_more_tiles():
    errs = []
    for rows in (16, 256):
        w = torch.randn(rows, 256)
        piv = pivot_of(w, 0.5)
        e = [
            abs(mask_quality(w, flex_mask_reference(w, TBS(4), 0.5, "fast", s, piv), TBS(4), 0.5)["density_error"])
            for s in range(10)
        ]
        errs.append(sum(e) / len(e))
    assert errs[1] < errs[0] / 2


def test_unstructured_is_threshold():
    w = torch.randn(8, 8)
    piv = pivot_of(w, 0.25)
    assert torch.equal(flex_mask(w, Unstructured(), 0.25, pivot=piv), w.abs() >= piv)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"density": 1.5}, ValueError, r"\[0, 1\]"),
        ({"density": -0.1}, ValueError, r"\[0, 1\]"),
        ({"density": float("nan")}, ValueError, r"\[0, 1\]"),
        ({"density": "half"}, TypeError, "real number"),
        ({"method": "magic"}, ValueError, "unknown method"),
        ({"pattern": "TBS(4)"}, TypeError, "Pattern"),
        ({"pattern": NM(2, 4), "density": 0.3}, ValueError, "fixes the density"),
        ({"w": torch.randn(6, 8)}, ValueError, "not divisible"),
        ({"w": torch.ones(8, 8, dtype=torch.int32)}, TypeError, "dtype"),
        ({"w": torch.full((8, 8), float("nan"))}, ValueError, "NaN"),
        ({"w": torch.randn(8)}, ValueError, "2-D"),
    ],
)
def test_bad_inputs(kwargs, exc, match):
    args = {"w": torch.randn(8, 8), "pattern": TBS(4), "density": 0.5, "pivot": 0.5, **kwargs}
    with pytest.raises(exc, match=match):
        flex_mask(**args)


def test_tie_share_makes_the_budget_exact_with_ties():
    """bf16-like data: many entries equal the pivot; the tie share keeps E[kept] = k."""
    from kernels.flex import tie_share

    w = torch.randint(-8, 9, (64, 256)).float()  # 17 values only: massive ties
    d = 0.5
    k = round(d * w.numel())
    piv = pivot_of(w, d)
    tie = tie_share(w, piv, d)
    assert 0.0 < tie < 1.0
    _, counts = tile_counts(w, TBS(4), piv, tie)
    assert abs(float(counts.sum()) - k) < 1e-2
    m = flex_mask(w, TBS(4), d, method="torch")  # pivot and tie from w
    assert 0 <= k - int(m.sum()) < 16
    kept = [int(flex_mask(w, TBS(4), d, method="fast", seed=s).sum()) for s in range(30)]
    assert abs(sum(kept) / len(kept) - k) < 0.01 * k
    ref = flex_mask_reference(w, TBS(4), d, "fast", 5, piv, tie)
    assert torch.equal(TBS(4).tile_configs(fast_mask_triton(w, TBS(4), piv, 5, tie)), TBS(4).tile_configs(ref))


def test_generated_tbs4_kernel_is_current():
    from kernels._gen_flex_tbs4 import TARGET, render

    assert TARGET.read_text() == render(), "run: python -m kernels._gen_flex_tbs4"
