"""GPU only (marked ``gpu``, skipped elsewhere): SparseLinear's cuSPARSELt path equals the dense
fallback (row- and column-major layouts, autocast with an fp32 master, a refused token count),
CUDA-graph capture with fresh MVUE draws per replay, and the ``Gemm24Only`` ceiling layer's exact
forward and input gradient."""

from __future__ import annotations

import pytest
import torch

from kernels import SparseLinear
from kernels.ops.mvue import mvue24
from tests.helpers import assert_close_rel
from tests.layers.sparse_linear_helpers import (
    SPARSE_MODES,
    col_major,
    is_col_major,
    layer_data,
    layer_reference,
    run_layer,
)

pytestmark = pytest.mark.filterwarnings("ignore:SparseLinear.*dense fallback:UserWarning")


CUDA = torch.cuda.is_available()


def gpu(fn):  # noqa: ANN001, ANN201 (a decorator)
    """GPU-only test: marked ``gpu`` (the campaign selects them with ``-m gpu``), skipped elsewhere."""
    return pytest.mark.gpu(pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")(fn))


def _gpu_layer(mode, dtype=torch.bfloat16, out=256, inp=512, checks=False):
    torch.manual_seed(22)
    return SparseLinear(inp, out, mode=mode, decay=1e-2, checks=checks, device="cuda", dtype=dtype)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", SPARSE_MODES)
@pytest.mark.parametrize("dtype,checks", [(torch.bfloat16, False), (torch.float16, True)])
def test_cusparselt_matches_fallback(mode, dtype, checks):
    from kernels.ops.sparse_gemm import cusparselt_available

    if not cusparselt_available():
        pytest.skip("torch has no cuSPARSELt")
    layer = _gpu_layer(mode, dtype=dtype, checks=checks)
    g = torch.Generator(device="cuda").manual_seed(23)
    x = torch.randn(2, 64, 512, device="cuda", dtype=dtype, generator=g)
    dy = torch.randn(2, 64, 256, device="cuda", dtype=dtype, generator=g)
    results = {}
    for use in (True, False):
        layer.use_cusparselt = use
        if layer.mvue_seed is not None:
            layer.mvue_seed.fill_(1234)
        layer.weight.grad = layer.bias.grad = None
        res = run_layer(layer, x, dy)
        assert layer.backend == ("cusparselt" if use else "dense"), layer.fallback_reason
        results[use] = [t.float() for t in res]
    for a, b in zip(results[True], results[False], strict=True):
        assert_close_rel(a, b, 1e-2)
    ry, rdx, rdw, rdb = (
        layer_reference(layer, x.float(), dy.float(), layer.mask, None) if mode != "fst" else (None,) * 4
    )
    if mode != "fst":
        assert_close_rel(results[True][0], ry, 2e-2)
        assert_close_rel(results[True][1], rdx, 2e-2)
        assert_close_rel(results[True][2], rdw, 2e-2)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_cusparselt_column_major_layouts_match_row_major(mode):
    """On cuSPARSELt: column-major output (transpose_result off, bias per row in the epilogue),
    column-major input (B read without a copy), column-major grad_output (MVUE packed from
    rows) give what the row-major path gives (same mask and MVUE seed)."""
    from kernels.ops.sparse_gemm import cusparselt_available

    if not cusparselt_available():
        pytest.skip("torch has no cuSPARSELt")
    layer = _gpu_layer(mode)
    g = torch.Generator(device="cuda").manual_seed(25)
    x = torch.randn(2, 64, 512, device="cuda", dtype=torch.bfloat16, generator=g)
    dy = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16, generator=g)
    results = {}
    for layout in ("row", "col"):
        for inp in ("row", "col"):
            layer.output_layout = layout
            layer.weight.grad = layer.bias.grad = None
            if layer.mvue_seed is not None:
                layer.mvue_seed.fill_(99)
            xi = (x if inp == "row" else col_major(x)).clone(memory_format=torch.preserve_format)
            dyi = dy if inp == "row" else col_major(dy)
            xi.requires_grad_(True)
            y = layer(xi)
            assert layer.backend == "cusparselt", layer.fallback_reason
            assert is_col_major(y) == (layout == "col")
            y.backward(dyi)
            results[layout, inp] = [t.float() for t in (y, xi.grad, layer.weight.grad, layer.bias.grad)]
    for key, res in results.items():
        for a, b in zip(res, results["row", "row"], strict=True):
            assert torch.isfinite(a).all(), key
            assert_close_rel(a, b, 1e-2)


@pytest.mark.gpu
@gpu
def test_cuda_autocast_uses_cusparselt_with_fp32_master():
    from kernels.ops.sparse_gemm import cusparselt_available

    if not cusparselt_available():
        pytest.skip("torch has no cuSPARSELt")
    layer = _gpu_layer("fst", dtype=torch.float32)
    x = torch.randn(128, 512, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16 and layer.backend == "cusparselt", layer.fallback_reason
    y.float().pow(2).mean().backward()
    assert layer.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    assert torch.isfinite(layer.weight.grad).all() and torch.isfinite(x.grad).all()


@pytest.mark.gpu
@gpu
def test_cuda_refused_token_count_falls_back_with_same_math():
    layer = _gpu_layer("fst", checks=True)
    x, dy = (t.cuda().bfloat16() for t in layer_data((2, 50, 512), 256, seed=24))  # T = 100: not a multiple of 16
    seed = int(layer.mvue_seed)
    with pytest.warns(UserWarning, match="100 columns"):
        y, dx, dw, db = run_layer(layer, x, dy)
    assert layer.backend == "dense" and "100 columns" in layer.fallback_reason
    mask = layer.mask
    w = layer.weight.double() * mask
    assert_close_rel(y, x.double() @ w.T + layer.bias.double(), 1e-2)
    assert_close_rel(dx, dy.double() @ w, 1e-2)
    dyt = dy.reshape(100, 256).t().contiguous()
    g = mvue24(dyt, -1, seed=seed).double()  # T % 4 == 0: no padding
    rdw = g @ x.reshape(100, 512).double() + 1e-2 * layer.weight.double() * (~mask).double()
    assert_close_rel(dw, rdw, 1e-2)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", SPARSE_MODES)
def test_cuda_graph_capture_and_fresh_mvue_draws(mode):
    layer = _gpu_layer(mode)
    x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # eager warm-up: initial mask, algorithm search
        for _ in range(2):
            layer.weight.grad = layer.bias.grad = None
            layer(x).backward(dy)
    torch.cuda.current_stream().wait_stream(s)
    layer.weight.grad = layer.bias.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = layer(x)
        y.backward(dy)
    grads, seeds = [], []
    for _ in range(2):
        seeds.append(None if layer.mvue_seed is None else int(layer.mvue_seed))
        graph.replay()
        torch.cuda.synchronize()
        grads.append(layer.weight.grad.clone())
    mask = layer.mask
    ry, rdx, rdw, rdb = layer_reference(layer, x.float(), dy.float(), mask, None) if mode != "fst" else (None,) * 4
    assert torch.isfinite(y).all() and torch.isfinite(grads[0]).all()
    if mode == "fst":
        assert seeds[1] == seeds[0] + 1 and int(layer.mvue_seed) == seeds[0] + 2
        assert not torch.equal(grads[0], grads[1])  # each replay draws afresh
        for grad, seed in zip(grads, seeds, strict=True):
            g = mvue24(dy.t().contiguous(), -1, seed=seed).double()
            expect = g @ x.double() + 1e-2 * layer.weight.double() * (~mask).double()
            assert_close_rel(grad, expect, 2e-2)
    else:
        assert torch.equal(grads[0], grads[1])
        assert_close_rel(grads[0], rdw, 2e-2)
    # new weights (an optimizer step, mask unchanged): the replay's packed values follow them
    if mode != "srste":
        with torch.no_grad():
            layer.weight.mul_(0.5).add_(0.01)
        layer.after_optimizer_step(1, 10**6)  # not a refresh step
        assert torch.equal(layer.mask, mask)
        graph.replay()
        torch.cuda.synchronize()
        assert_close_rel(y, x.double() @ (layer.weight.double() * mask).T + layer.bias.double(), 2e-2)
    # a new mask written outside the graph is seen by the next replay
    if mode != "srste":
        with torch.no_grad():
            layer.weight.mul_(torch.rand_like(layer.weight) + 0.5)
        layer.after_optimizer_step(layer.mask_interval, 10**6)
        new_mask = layer.mask
        assert not torch.equal(new_mask, mask)
        graph.replay()
        torch.cuda.synchronize()
        ref_y = x.double() @ (layer.weight.double() * new_mask).T + layer.bias.double()
        assert_close_rel(y, ref_y, 2e-2)


@pytest.mark.gpu
@gpu
def test_gemm24_only_ceiling_layer_forward_and_dx_exact():
    """The timing-only ceiling layer of the speed suites (kernels.layers.gemm24.Gemm24Only) runs
    the fst GEMMs: its output and input gradient equal the masked dense reference."""
    from kernels.layers.gemm24 import Gemm24Only
    from kernels.ops.sparse_gemm import cusparselt_available

    if not cusparselt_available():
        pytest.skip("torch has no cuSPARSELt")
    torch.manual_seed(26)
    layer = Gemm24Only(512, 256).cuda()
    layer.output_layout = "col"
    x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    y = layer(x)
    y.backward(dy)
    w = layer.weight.double() * layer.mask
    assert is_col_major(y)
    assert_close_rel(y, x.double() @ w.T + layer.bias.double(), 1e-2)
    assert_close_rel(x.grad, dy.double() @ w, 1e-2)
    assert layer.weight.grad.dtype == torch.float32 and torch.isfinite(layer.weight.grad).all()
