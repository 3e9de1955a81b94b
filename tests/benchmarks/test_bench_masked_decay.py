"""Masked decay ``grad += alpha * weight * ~mask`` in place (Hu et al.), 8192x8192 and a GPT-2 FFN
weight 3072x768, bf16 and fp32, checked against the reference before it is timed (each round
restores grad first, untimed)."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.masked_decay import masked_decay_, masked_decay_bytes, masked_decay_reference
from tests.benchmarks import DEVICE, DTYPES, paper_params, run_benchmark
from tests.helpers import rel_err

ALPHA = 6e-5
TOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}  # as tests/kernels/test_masked_decay.py
SHAPES = [(8192, 8192), (3072, 768)]
CASES = [(f"{r}x{c}-{d}", (r, c, d), (16, 32, d)) for r, c in SHAPES for d in ("bf16", "fp32")]


@pytest.mark.parametrize("case", paper_params(CASES))
def test_masked_decay(benchmark, case, copy_gbps):
    r, c, dname = case
    dtype = DTYPES[dname]
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    grad0 = torch.randn(r, c, device=DEVICE, generator=gen).to(dtype)
    weight = torch.randn(r, c, device=DEVICE, generator=gen).to(dtype)
    mask = torch.rand(r, c, device=DEVICE, generator=gen) < 0.5
    grad = grad0.clone()
    fn = lambda: masked_decay_(grad, weight, mask, ALPHA)  # noqa: E731

    out = fn()
    ref = masked_decay_reference(grad0, weight, mask, ALPHA)
    assert out is grad
    assert rel_err(out, ref) <= TOL[dtype], f"relative error {rel_err(out, ref):.2e}"
    del ref

    nbytes = masked_decay_bytes(grad, weight, mask)
    run_benchmark(benchmark, fn, setup=lambda: grad.copy_(grad0), nbytes=nbytes, copy_gbps=copy_gbps)
