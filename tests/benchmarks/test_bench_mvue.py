"""MVUE 2:4 (Hu et al.): the Triton kernel at 8192x8192 and a GPT-2 FFN weight 3072x768, bf16 and
fp32, checked bit-exact against the reference given the same uniforms before it is timed."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.mvue import mvue24, mvue24_bytes, mvue24_reference, mvue24_uniforms
from tests.benchmarks import DEVICE, DTYPES, paper_params, run_benchmark
from tests.helpers import rel_err

SEED = 1234
SHAPES = [(8192, 8192), (3072, 768)]
CASES = [(f"{r}x{c}-{d}", (r, c, d), (16, 32, d)) for r, c in SHAPES for d in ("bf16", "fp32")]


@pytest.mark.parametrize("case", paper_params(CASES))
def test_mvue24(benchmark, case, copy_gbps):
    r, c, dname = case
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(r, c, device=DEVICE, generator=gen).to(DTYPES[dname])
    fn = lambda: mvue24(x, seed=SEED)  # noqa: E731

    out = fn()
    ref = mvue24_reference(x, u=mvue24_uniforms(SEED, x.numel() // 4, DEVICE))
    assert rel_err(out, ref) == 0.0, "kernel differs from the reference given the same uniforms"
    assert bool(((out != 0).reshape(-1, 4).sum(-1) <= 2).all()), "more than 2 nonzeros in a group of 4"
    del out, ref

    run_benchmark(benchmark, fn, nbytes=mvue24_bytes(x), copy_gbps=copy_gbps)
