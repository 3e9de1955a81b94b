"""2:4 GEMMs on cuSPARSELt, bf16, 8192 tokens through a GPT-2 FFN weight 3072x768 and an FFN weight
8192x2048: ``Sparse24Weight.linear`` (weight compressed once, at construction) and
``cslt_sparse_mm`` (the training GEMM: the sparse operand is packed inside every call, so the
timed call includes the packing), both as the layer's forward ``Y = X (W*M)^T``; plus
``F.linear`` on the same pruned weight as the dense baseline. TFLOP/s are dense-equivalent:
2*m*n*k, zeros of the 2:4 weight included (``extra_info['flops_convention']``).

Each output is checked against the float32 product of the same bf16 operands before it is timed:
after a warm-up call (the cuSPARSELt algorithm search runs there; its result is freed), the CUDA
caching allocator is left holding freed NaN blocks of the output's size (best effort), so an
element the GEMM leaves unwritten is NaN and fails the check (``rel_err`` never lets NaN pass).

On a GPU where cuSPARSELt refuses the problem (``backend``, ``cslt_refusal``) the sparse
benchmarks are skipped, saying why, rather than time the dense fallback under a sparse name; on a
CPU they run once through the dense fallback (``extra_info['backend'] == 'dense'``). Host cost:
an eager ``_cslt_sparse_mm`` spends ~1 ms of host time on an H100 (kernels/ops/sparse_gemm.py), which
these eager timings include where it exceeds the device time."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from kernels.ops.nm_mask import nm_mask
from kernels.ops.sparse_gemm import Sparse24Weight, cslt_refusal, cslt_sparse_mm
from tests.benchmarks import DEVICE, ON_GPU, paper_params, run_benchmark
from tests.helpers import rel_err

DTYPE = torch.bfloat16
TOL = 1e-2  # bf16 output (2^-9 rounding) vs the float32 product of the same bf16 operands
SHAPES = [(3072, 768), (8192, 2048)]  # weight [out, in]
TOKENS = 8192
CASES = [(f"{o}x{i}-t{TOKENS}-bf16", (o, i, TOKENS), (64, 128, 64)) for o, i in SHAPES]
FLOPS_CONVENTION = "dense-equivalent 2*m*n*k (the 2:4 weight's zeros counted)"


def _operands(out_f: int, in_f: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weight, its 2:4 mask along ``in``, input [tokens, in]), bf16, std 0.02 weight and unit input."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    w = (0.02 * torch.randn(out_f, in_f, device=DEVICE, generator=gen)).to(DTYPE)
    x = torch.randn(tokens, in_f, device=DEVICE, generator=gen).to(DTYPE)
    return w, nm_mask(w, 2, 4, dim=1), x


def _poison_cache(nbytes: int) -> None:
    """Empty the CUDA caching allocator, then leave one freed block of ``nbytes``, every byte 0xFF
    (NaN in bf16, fp16 and fp32), in it: the next allocations are carved from that block and start
    as NaN (best effort: the allocator picks the block). No-op on a CPU (no caching allocator)."""
    if not ON_GPU:
        return
    torch.cuda.empty_cache()
    block = torch.full((nbytes,), 0xFF, dtype=torch.uint8, device=DEVICE)
    torch.cuda.synchronize()
    del block


def _check(fn: Callable[[], torch.Tensor], ref: torch.Tensor, operand_bytes: int) -> None:
    """Warm up ``fn`` (algorithm search), poison the cache with room for the output and for
    ``operand_bytes`` of what the call allocates before it (the per-call packing of the sparse
    operand), then check one call against ``ref``."""
    fn()
    _poison_cache(ref.numel() * torch.finfo(DTYPE).bits // 8 + operand_bytes)
    out = fn()
    assert out.shape == ref.shape and out.dtype == DTYPE
    err = rel_err(out, ref)
    assert err <= TOL, f"relative error {err:.2e} vs the float32 product (inf: NaN/Inf in the output)"


def _record(benchmark, backend: str, reason: str | None) -> None:
    benchmark.extra_info["backend"] = backend
    benchmark.extra_info["flops_convention"] = FLOPS_CONVENTION
    if reason:
        benchmark.extra_info["fallback_reason"] = reason


@pytest.mark.parametrize("case", paper_params(CASES))
def test_sparse24_weight_linear(benchmark, case):
    out_f, in_f, tokens = case
    w, mask, x = _operands(out_f, in_f, tokens)
    sw = Sparse24Weight(w, mask, quiet=True)
    if ON_GPU and sw.backend != "cusparselt":
        pytest.skip(f"cuSPARSELt refuses this problem: {sw.fallback_reason}")
    assert torch.equal(sw.pruned, w * mask)
    fn = lambda: sw.linear(x)  # noqa: E731

    ref = x.float() @ sw.pruned.float().t()
    _check(fn, ref, operand_bytes=0)
    del ref

    _record(benchmark, sw.backend, sw.fallback_reason)
    run_benchmark(benchmark, fn, flops=2.0 * tokens * out_f * in_f)


@pytest.mark.parametrize("case", paper_params(CASES))
def test_cslt_sparse_mm(benchmark, case):
    out_f, in_f, tokens = case
    w, mask, x = _operands(out_f, in_f, tokens)
    wm = w * mask  # A [out, in], 2:4 along in; B = X^T [in, tokens] (a transposed view, as in SparseLinear)
    reason = cslt_refusal(out_f, in_f, tokens, DTYPE, DEVICE)
    if reason is None:
        fn = lambda: cslt_sparse_mm(wm, x.t(), transpose_result=True)  # noqa: E731
    elif ON_GPU:
        pytest.skip(f"cuSPARSELt refuses this problem: {reason}")
    else:  # SparseLinear's dense fallback of the same product
        fn = lambda: x @ wm.t()  # noqa: E731

    ref = x.float() @ wm.float().t()
    _check(fn, ref, operand_bytes=2 * wm.numel() * wm.element_size())  # slack: per-call packing
    del ref

    _record(benchmark, "dense" if reason else "cusparselt", reason)
    run_benchmark(benchmark, fn, flops=2.0 * tokens * out_f * in_f)


@pytest.mark.parametrize("case", paper_params(CASES))
def test_dense_linear_baseline(benchmark, case):
    out_f, in_f, tokens = case
    w, mask, x = _operands(out_f, in_f, tokens)
    wm = w * mask
    fn = lambda: F.linear(x, wm)  # noqa: E731

    ref = x.float() @ wm.float().t()
    _check(fn, ref, operand_bytes=0)
    del ref

    _record(benchmark, "dense", None)
    run_benchmark(benchmark, fn, flops=2.0 * tokens * out_f * in_f)
