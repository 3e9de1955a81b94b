"""2:4 magnitude mask (``nm_mask``) on an 8192x2048 weight, checked valid, magnitude-optimal per
group and equal to the reference before it is timed. (The timed call includes its NaN/Inf scan.)"""

from __future__ import annotations

import pytest
import torch

from kernels.ops.nm_mask import nm_mask, nm_mask_reference
from tests.benchmarks import DEVICE, DTYPES, paper_params, run_benchmark

CASES = [(f"8192x2048-{d}", (8192, 2048, d), (16, 32, d)) for d in ("bf16", "fp32")]


@pytest.mark.parametrize("case", paper_params(CASES))
def test_nm_mask_24(benchmark, case, copy_gbps):
    r, c, dname = case
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    w = torch.randn(r, c, device=DEVICE, generator=gen).to(DTYPES[dname])
    fn = lambda: nm_mask(w, 2, 4)  # noqa: E731

    mask = fn()
    assert mask.dtype == torch.bool and mask.shape == w.shape
    g, mg = w.abs().float().reshape(-1, 4), mask.reshape(-1, 4)
    assert bool((mg.sum(-1) == 2).all()), "not exactly 2 kept per group of 4"
    kept_min = torch.where(mg, g, torch.inf).amin(-1)
    dropped_max = torch.where(mg, -torch.inf, g).amax(-1)
    assert bool((kept_min >= dropped_max).all()), "a dropped entry is larger than a kept one"
    assert torch.equal(mask, nm_mask_reference(w, 2, 4)), "differs from the stable-sort reference"
    del g, mg, kept_min, dropped_max, mask

    run_benchmark(benchmark, fn, nbytes=w.numel() * (w.element_size() + 1), copy_gbps=copy_gbps)
