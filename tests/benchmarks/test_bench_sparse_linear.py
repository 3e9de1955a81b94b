"""``SparseLinear`` forward + backward (input and weight gradients, masked decay) at a GPT-2 124M FFN
shape, 768 -> 3072 over 8192 tokens (8 x 1024), bf16 parameters, modes dense, fst, weight24 and
srste, built as the training suites build them (``checks=False``, ``track_flip=False``). Output
and input gradient are checked against the float32 dense twin with the same mask
(``suites._training_bench.check_against_twin``) before the step is timed. TFLOP/s are
dense-equivalent: the three GEMMs at 2*m*n*k each, 2:4 zeros counted
(``extra_info['flops_convention']``).

On a GPU where cuSPARSELt refuses the sparse GEMMs (``backend``, ``fallback_reason``) the sparse
modes are skipped, saying why; on a CPU every mode runs once through the dense fallback."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kernels.layers.sparse_linear import SparseLinear
from suites._training_bench import check_against_twin, fwd_bwd
from tests.benchmarks import DEVICE, ON_GPU, paper_params, run_benchmark

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")

DTYPE = torch.bfloat16
TOL = {"out": 2e-2, "dx": 3e-2}  # bf16 module vs float32 masked twin, as suites/figure6.py
MODES = ("dense", "fst", "weight24", "srste")
FULL, TINY = (768, 3072, 8, 1024), (32, 128, 2, 16)  # (in, out, batch, sequence)
CASES = [(f"{i}x{o}-t{b * s}-bf16-{m}", (i, o, b, s, m), (*TINY, m)) for i, o, b, s in [FULL] for m in MODES]
FLOPS_CONVENTION = "dense-equivalent 3 GEMMs x 2*m*n*k (the 2:4 zeros counted)"


def _layer(in_f: int, out_f: int, mode: str) -> nn.Sequential:
    """The layer (wrapped: ``masked_dense_twin`` names its weights by submodule)."""
    torch.manual_seed(0)
    layer = SparseLinear(in_f, out_f, mode=mode, checks=False, track_flip=False, device=DEVICE, dtype=DTYPE)
    return nn.Sequential(layer)


@pytest.mark.parametrize("case", paper_params(CASES))
def test_sparse_linear_fwd_bwd(benchmark, case):
    in_f, out_f, batch, seq, mode = case
    module = _layer(in_f, out_f, mode)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    x = torch.randn(batch, seq, in_f, device=DEVICE, dtype=DTYPE, generator=gen).requires_grad_(True)
    dy = torch.randn(batch, seq, out_f, device=DEVICE, dtype=DTYPE, generator=gen) * 0.1
    fn = fwd_bwd(module, x, dy)

    e_out, e_dx = check_against_twin(module, lambda: nn.Sequential(nn.Linear(in_f, out_f)), x, dy)
    assert e_out <= TOL["out"], f"output: relative error {e_out:.2e} vs the float32 masked twin"
    assert e_dx <= TOL["dx"], f"input grad: relative error {e_dx:.2e} vs the float32 masked twin"
    layer = module[0]
    if ON_GPU and mode != "dense" and layer.backend != "cusparselt":
        pytest.skip(f"cuSPARSELt refuses this layer's GEMMs: {layer.fallback_reason}")
    if mode != "dense":
        mask = layer.mask.reshape(out_f, in_f // 4, 4)
        assert bool((mask.sum(-1) == 2).all()), "mask is not 2:4 along in"

    info = benchmark.extra_info
    info["backend"] = "dense" if mode == "dense" else layer.backend
    info["flops_convention"] = FLOPS_CONVENTION
    if mode != "dense" and layer.fallback_reason:
        info["fallback_reason"] = layer.fallback_reason
    run_benchmark(benchmark, fn, flops=3 * 2.0 * batch * seq * in_f * out_f)
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
