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
    with pytest.raises(ValueError, match="divisible by 4"):
        Sparse24Weight(torch.randn(8, 6), quiet=True)
    sw = Sparse24Weight(w, quiet=True)
    with pytest.raises(ValueError, match="features"):
        sw.linear(torch.randn(2, 4))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cusparselt_matches_dense():
    w = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    sw = Sparse24Weight(w)
    ref = torch.nn.functional.linear(x.double(), sw.pruned.double())
    assert_close_rel(sw.linear(x), ref, 2e-2)
