"""kernels.ops.cslt_pack, the single-operand layout: our packing equals the outputs of
torch._cslt_compress recorded on an H100 (fixture), the Triton kernel (interpreter) equals the
plain-PyTorch reference and writes every element, bad input raises, and no layout matches off CUDA."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.cslt_pack import (
    cslt_pack,
    cslt_pack_pair,
    cslt_pack_reference,
    cslt_unpack_reference,
    layout_matches,
    packed_alloc,
    packed_numel,
)
from tests.kernels.cslt_pack_helpers import DTYPES, FIXTURE, bits, rand24


@pytest.mark.parametrize("idx", range(6))
def test_reference_equals_recorded_cusparselt(idx):
    """The layout we write equals what cuSPARSELt 0.8 wrote on an H100 (index-coded values, so a
    value or metadata nibble in the wrong place cannot pass)."""
    data = torch.load(FIXTURE, weights_only=False)
    c = data["cases"][idx]
    m, k = c["m"], c["k"]
    dt = torch.bfloat16 if "bfloat16" in c["dtype"] else torch.float16
    code = torch.arange(m).view(m, 1).expand(m, k) if c["code"] == "row" else torch.arange(k).view(1, k).expand(m, k)
    dense = torch.where(c["mask"], (data["offset"] + code).to(torch.int16), torch.zeros((), dtype=torch.int16))
    a = dense.view(dt)
    for mask in (c["mask"], None):
        ours = cslt_pack_reference(a, mask)
        assert ours.shape == c["compressed_bits"].shape
        assert torch.equal(bits(ours), c["compressed_bits"].reshape(-1))
        assert torch.equal(bits(cslt_pack(a, mask)), c["compressed_bits"].reshape(-1))  # Triton (interpreter)
    assert torch.equal(cslt_unpack_reference(c["compressed_bits"].view(dt), m, k).view(torch.int16), dense)


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(64, 64), (96, 128), (32, 192), (128, 256)])
def test_kernel_matches_reference(dname, shape):
    dt = DTYPES[dname]
    gen = torch.Generator().manual_seed(hash(shape) % 1000)
    m, k = shape
    a = torch.randn(m, k, generator=gen).to(dt)
    mask = rand24(m, k, gen)
    ref = cslt_pack_reference(a, mask)
    assert torch.equal(bits(cslt_pack(a, mask)), bits(ref))
    # already-pruned operand, no mask: the nonzeros are kept (some groups with fewer than two)
    am = a * mask
    am[0, :8] = 0
    assert torch.equal(bits(cslt_pack(am)), bits(cslt_pack_reference(am)))
    assert torch.equal(cslt_unpack_reference(cslt_pack(am), m, k), am)
    # fp32 source rounded in the kernel exactly as torch rounds (bf16 by hand in the interpreter)
    a32 = torch.randn(m, k, generator=gen)
    assert torch.equal(bits(cslt_pack(a32, mask, dtype=dt)), bits(cslt_pack_reference(a32.to(dt), mask)))


@pytest.mark.parametrize("src, dst", [("fp16", "bf16"), ("bf16", "fp16")])
def test_16bit_operand_packed_in_the_other_16bit_dtype(src, dst):
    """A 16-bit operand packed in the other 16-bit dtype is rounded once, as torch's cast rounds it."""
    gen = torch.Generator().manual_seed(17)
    a = torch.randn(64, 128, generator=gen).to(DTYPES[src])
    mask = rand24(64, 128, gen)
    got = cslt_pack(a, mask, dtype=DTYPES[dst])
    assert got.dtype == DTYPES[dst]
    assert torch.equal(bits(got), bits(cslt_pack_reference(a.to(DTYPES[dst]), mask)))
    assert torch.equal(cslt_unpack_reference(got, 64, 128), (a * mask).to(DTYPES[dst]))


def test_every_element_written():
    """Outputs poisoned before the launch: every value and metadata word is overwritten."""
    from kernels.ops._cslt_pack_triton import pack_into

    gen = torch.Generator().manual_seed(3)
    m, k = 96, 128
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    mask = rand24(m, k, gen)
    n = packed_numel(m, k)
    out = torch.full((packed_alloc(m, k),), 0x7FC1, dtype=torch.int16).view(torch.bfloat16)
    pack_into(a, mask, out, None, None)
    assert packed_alloc(m, k) > n  # 96 rows: the packed size is rounded up to whole rows
    assert torch.equal(bits(out)[:n], bits(cslt_pack_reference(a, mask))[:n])


def test_bad_input_raises():
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(64, 64, generator=gen).to(torch.bfloat16)
    mask = rand24(64, 64, gen)
    with pytest.raises(ValueError, match="rows % 32"):
        cslt_pack(torch.zeros(48, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="cols % 64"):
        cslt_pack(torch.zeros(64, 32, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        cslt_pack(a.float())
    with pytest.raises(TypeError, match="bool"):
        cslt_pack(a, mask.to(torch.uint8))
    with pytest.raises(ValueError, match="must match"):
        cslt_pack(a, mask[:32])
    bad = mask.clone()
    bad[3, :4] = True  # 4 kept in one group
    with pytest.raises(ValueError, match="not 2:4"):
        cslt_pack(a, bad)
    with pytest.raises(ValueError, match="not 2:4"):
        cslt_pack(a)  # dense: more than 2 nonzeros per group
    with pytest.raises(ValueError, match="not 2:4"):
        cslt_pack_reference(a)
    with pytest.raises(ValueError, match="rows % 64"):
        cslt_pack_pair(torch.zeros(96, 64), torch.zeros(96, 64, dtype=torch.bool), dtype=torch.bfloat16)


def test_layout_never_matches_off_cuda():
    """There is no cuSPARSELt to match on a CPU: callers compress with torch (or fall back),
    also with a CPU-only torch, where asking about CUDA graph capture would raise."""
    for dt in (torch.bfloat16, torch.float16):
        assert layout_matches(torch.device("cpu"), dt) is False
        assert layout_matches("cpu", dt) is False
