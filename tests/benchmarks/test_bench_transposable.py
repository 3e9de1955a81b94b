"""Transposable 2:4 mask search (Hu et al. Table 2 shapes, fp16 and fp32): the exhaustive Triton
kernel, checked valid and optimal per tile before it is timed."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.transposable import as_tiles, is_transposable_24, tile_scores, transposable_mask
from tests.benchmarks import DEVICE, DTYPES, paper_params, run_benchmark

# the paper's shapes as printed (see suites/table2.py)
TABLE2 = [(3072, 768), (4096, 1024), (5120, 1280), (1024, 1600), (8192, 2048), (16384, 4096), (30768, 8192)]
TINY = (16, 32)
CASES = [(f"{r}x{c}-{d}", (r, c, d), (*TINY, d)) for r, c in TABLE2 for d in ("fp16", "fp32")]


def _optimal_per_tile(w: torch.Tensor, mask: torch.Tensor, step: int = 4096) -> bool:
    """Every 4x4 tile of ``mask`` retains the best of the 90 patterns' |w| (fp32, row chunks)."""
    for r in range(0, w.shape[0], step):
        wc, mc = w[r : r + step], mask[r : r + step]
        best = tile_scores(wc, torch.float32).amax(-1)
        kept = as_tiles(wc.abs().float() * mc).sum(-1)
        if not bool((kept >= best * (1 - 1e-5) - 1e-6).all()):
            return False
    return True


@pytest.mark.parametrize("case", paper_params(CASES))
def test_transposable_exhaustive(benchmark, case, copy_gbps):
    r, c, dname = case
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    w = torch.randn(r, c, device=DEVICE, generator=gen).to(DTYPES[dname])
    fn = lambda: transposable_mask(w, method="exhaustive", check_finite=False)  # noqa: E731

    mask = fn()
    assert mask.dtype == torch.bool and mask.shape == w.shape
    assert is_transposable_24(mask), "mask is not transposable 2:4"
    assert _optimal_per_tile(w, mask), "exhaustive mask is not optimal per tile"
    del mask

    out = run_benchmark(benchmark, fn, nbytes=w.numel() * (w.element_size() + 1), copy_gbps=copy_gbps)
    assert is_transposable_24(out)
