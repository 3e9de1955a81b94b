"""flex-SS mask generation (FAST), method ``fast`` with the pivot given: TBS(4,4), TBS(8,8),
Vegeta(4) and 2:4 on a Llama-2 13B FFN weight 13824x5120 bf16 at density 0.5. Each mask is
checked valid and equal (per-tile configuration) to the PyTorch reference before it is timed."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.flex import flex_mask, flex_mask_reference, tie_share
from kernels.ops.patterns import NM, TBS, Vegeta
from kernels.ops.pivot import find_pivot
from tests.benchmarks import DEVICE, paper_params, run_benchmark

DENSITY = 0.5
SEED = 1234
PATTERNS = {"TBS(4,4)": TBS(4), "TBS(8,8)": TBS(8), "Vegeta(4)": Vegeta(4), "2:4": NM(2, 4)}
CASES = [(f"13824x5120-bf16-{name}", (13824, 5120, name), (64, 128, name)) for name in PATTERNS]


@pytest.mark.parametrize("case", paper_params(CASES))
def test_flex_mask_fast(benchmark, case, copy_gbps):
    r, c, name = case
    pattern = PATTERNS[name]
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    w = (0.02 * torch.randn(r, c, device=DEVICE, generator=gen)).to(torch.bfloat16)
    pivot = find_pivot(w, DENSITY, method="exact")  # given: not part of the timed call
    tie = tie_share(w, pivot, DENSITY)
    fn = lambda: flex_mask(w, pattern, DENSITY, "fast", SEED, pivot, tie=tie, check_finite=False)  # noqa: E731

    mask = fn()
    assert mask.dtype == torch.bool and mask.shape == w.shape
    pattern.validate(mask)  # raises naming the first bad tile
    ref = flex_mask_reference(w, pattern, DENSITY, "fast", SEED, pivot, tie)
    # as suites/figure3.py: an fp32 contraction may flip a draw within one bit of a threshold
    diff = (pattern.tile_configs(mask) != pattern.tile_configs(ref)).float().mean().item()
    assert diff <= 1e-5, f"{diff:.2e} of tiles differ from the reference"
    del mask, ref

    run_benchmark(benchmark, fn, nbytes=w.numel() * (w.element_size() + 1), copy_gbps=copy_gbps)
