"""GEGLU forward on column-major fp16 input 32x512xd (Hu et al. Table 3; d = input width, the
output has d/2 columns), checked against an fp64 eager GEGLU before it is timed."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.geglu import geglu, geglu_bytes
from tests.benchmarks import DEVICE, paper_params, run_benchmark
from tests.helpers import rel_err

APPROXIMATE = "tanh"  # as suites/table3.py
CASES = [(f"32x512x{d}-fp16-colmajor", (32, 512, d), (2, 16, 32)) for d in (768, 2048, 8192)]


def _eager(z: torch.Tensor) -> torch.Tensor:
    r = z.shape[-1] // 2
    return torch.nn.functional.gelu(z[:, :r], approximate=APPROXIMATE) * z[:, r:]


@pytest.mark.parametrize("case", paper_params(CASES))
def test_geglu_column_major(benchmark, case, copy_gbps):
    b, s, d = case
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    z = torch.randn(d, b * s, device=DEVICE, dtype=torch.float16, generator=gen).t()  # [b*s, d], column-major
    assert z.stride() == (1, b * s)
    fn = lambda: geglu(z, approximate=APPROXIMATE, check_finite=False)  # noqa: E731

    out = fn()
    err = rel_err(out, _eager(z.double()))
    assert err <= 2e-3, f"relative error {err:.2e} vs fp64 eager"
    assert out.stride() == (1, b * s), f"output is not column-major: {out.stride()}"

    run_benchmark(benchmark, fn, nbytes=geglu_bytes(z), copy_gbps=copy_gbps)
