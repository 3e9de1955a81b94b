import pytest
import torch

from kernels import Sparse24Weight, nm_mask
from tests.helpers import assert_close_rel


def test_cpu_fallback_is_dense_masked_and_says_why():
    w = torch.randn(64, 128)
    x = torch.randn(5, 3, 128)
    with pytest.warns(UserWarning, match="dense fallback"):
        sw = Sparse24Weight(w)
    assert sw.backend == "dense" and "CUDA" in sw.fallback_reason
    mask = nm_mask(w, 2, 4, dim=1)
    assert torch.equal(sw.mask, mask)
    b = torch.randn(64)
    assert_close_rel(sw.linear(x, b), torch.nn.functional.linear(x.double(), (w * mask).double(), b.double()), 1e-6)


def test_bad_inputs():
    w = torch.randn(8, 8)
    with pytest.raises(ValueError, match="not 2:4"):
        Sparse24Weight(w, mask=torch.ones(8, 8, dtype=torch.bool), quiet=True)
    with pytest.raises(TypeError, match="bool"):
        Sparse24Weight(w, mask=torch.ones(8, 8), quiet=True)
    with pytest.raises(ValueError, match="mask shape"):
        Sparse24Weight(w, mask=nm_mask(torch.randn(8, 16), 2, 4), quiet=True)
    with pytest.raises(ValueError, match="divisible by 4"):
        Sparse24Weight(torch.randn(8, 6), quiet=True)
    sw = Sparse24Weight(w, quiet=True)
    with pytest.raises(ValueError, match="features"):
        sw.linear(torch.randn(2, 4))
    # the dense fallback once cast the weight to x's dtype: an int x truncated it to integers
    with pytest.raises(TypeError, match="dtype"):
        sw.linear(torch.ones(2, 8, dtype=torch.int64))
    with pytest.raises(TypeError, match="dtype"):
        sw.linear(torch.ones(2, 8, dtype=torch.float64))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cusparselt_matches_dense():
    w = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    sw = Sparse24Weight(w)
    ref = torch.nn.functional.linear(x.double(), sw.pruned.double())
    assert_close_rel(sw.linear(x), ref, 2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("transpose_result", [False, True])
def test_searched_config_is_cached_and_correct(transpose_result):
    """The configuration chosen by timing (alg_id, split_k, split_k_mode) is cached per problem,
    is one of the candidates, and gives the product: the searched split-K one included."""
    import kernels.ops.sparse_gemm as sg
    from kernels.ops.cslt_pack import cslt_pack

    m, k, n = 256, 512, 384
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    mask = nm_mask(a, 2, 4, dim=1)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    packed = cslt_pack(a, mask)
    ref = (a * mask).double() @ b.double()
    ref = ref.t() if transpose_result else ref
    y = sg.cslt_mm_packed(packed, (m, k), b, transpose_result=transpose_result)
    assert_close_rel(y, ref, 2e-2)
    key = ("mm", (m, k), tuple(b.shape), b.stride(), transpose_result, b.dtype, b.device.index)
    cfg = sg._ALG_CACHE[key]
    assert len(cfg) == 3 and all(isinstance(v, int) for v in cfg)
    found = torch._C._cusparselt.mm_search(packed, b, None, None, None, transpose_result)
    for alg, split_k, mode in {cfg, (int(found[0]), int(found[1]), int(found[2]))}:
        assert_close_rel(sg._cslt_mm(packed, b, (alg, split_k, mode), transpose_result=transpose_result), ref, 2e-2)
