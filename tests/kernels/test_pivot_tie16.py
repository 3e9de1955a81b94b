"""kernels.ops.pivot.pivot_and_tie_16bit (Triton histogram kernels, interpreter): pivot and tie
share equal the exact select and the reference, over many tensors and blocks, and non-finite or bad
input raises."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.pivot import find_pivot

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("density", [0.5, 0.01, 0.999, 1.0])
def test_pivot_and_tie_16bit_equals_exact(dtype, density):
    from kernels.ops.flex import tie_share
    from kernels.ops.pivot import pivot_and_tie_16bit, pivot_and_tie_16bit_reference

    g = torch.Generator().manual_seed(3)
    ts = [torch.randn(64, 96, generator=g).to(dtype), (torch.randn(333, generator=g) * 5).round().to(dtype)]
    piv, tie = pivot_and_tie_16bit(ts, density)  # Triton kernels under the interpreter
    ref = find_pivot(ts, density, method="exact")
    assert piv == ref
    assert tie == pytest.approx(tie_share(ts, ref, density))
    assert pivot_and_tie_16bit_reference(ts, density) == (piv, tie)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_pivot_and_tie_16bit_many_tensors_and_blocks(dtype):
    """Several tensors, more blocks than programs (the in-kernel loop), odd sizes, heavy ties."""
    from kernels.ops import _pivot_triton
    from kernels.ops.flex import tie_share
    from kernels.ops.pivot import pivot_and_tie_16bit, pivot_and_tie_16bit_reference

    g = torch.Generator().manual_seed(5)
    ts = [(torch.randn(n, generator=g) * 3).round().to(dtype) / 4 for n in (5000, 1, 12289)]
    old = _pivot_triton._MAX_PROGRAMS, _pivot_triton.BLOCK
    _pivot_triton._MAX_PROGRAMS, _pivot_triton.BLOCK = 2, 1024
    try:
        for density in (0.3, 0.77):
            piv, tie = pivot_and_tie_16bit(ts, density)
            assert piv == find_pivot(ts, density, method="exact")
            assert tie == pytest.approx(tie_share(ts, piv, density))
            assert 0.0 < tie < 1.0  # rounded values: the pivot is tied
            assert pivot_and_tie_16bit_reference(ts, density) == (piv, tie)
            counts = _pivot_triton.hist16_counts(ts, 1, max_tensors=1)  # one tensor per launch
            assert int(counts[:256].sum()) == sum(t.numel() for t in ts)
    finally:
        _pivot_triton._MAX_PROGRAMS, _pivot_triton.BLOCK = old


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_pivot_and_tie_16bit_refuses_nonfinite(bad):
    from kernels.ops.pivot import pivot_and_tie_16bit, pivot_and_tie_16bit_reference

    t = torch.randn(4096).to(torch.bfloat16)
    t[17] = bad
    for fn in (pivot_and_tie_16bit, pivot_and_tie_16bit_reference):
        for density in (0.5, 0.0):  # at density 0 no pass counts them: it returned (inf, 1) before
            with pytest.raises(ValueError, match="NaN or Inf"):
                fn([t], density)


def test_pivot_and_tie_16bit_bad_input():
    from kernels.ops.pivot import pivot_and_tie_16bit

    with pytest.raises(TypeError, match="bf16 or fp16"):
        pivot_and_tie_16bit([torch.randn(8)], 0.5)
    with pytest.raises(TypeError, match="share one dtype"):
        pivot_and_tie_16bit([torch.randn(8).half(), torch.randn(8).bfloat16()], 0.5)
    for d in (-0.1, 1.5, float("nan"), True, "0.5"):  # float() took the last two
        with pytest.raises(ValueError, match="density"):
            pivot_and_tie_16bit([torch.randn(8).half()], d)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_pivot_and_tie_16bit_zero_budget_keeps_nothing(dtype):
    """k = round(density * n) == 0 (density 0, or a density too small for n): +inf, tie share 1."""
    from kernels.ops.pivot import pivot_and_tie_16bit, pivot_and_tie_16bit_reference

    ts = [torch.randn(64, generator=torch.Generator().manual_seed(4)).to(dtype), torch.ones(36, dtype=dtype)]
    for density in (0.0, 0.004):  # 0.004 * 100 rounds to 0
        for fn in (pivot_and_tie_16bit, pivot_and_tie_16bit_reference):
            assert fn(ts, density) == (float("inf"), 1.0)
        assert find_pivot(ts, density, method="exact") == float("inf")
