"""GPU only (marked ``gpu``, skipped elsewhere): kernels.ops.cslt_pack bit-equal with
torch._cslt_compress, the compiled pair refresh, fused MVUE pack, fused GELU / gated backward packs
and pruned-entries decay + cast equal to packing afresh, and the packed operands multiplied on
cuSPARSELt (with a bias) vs float64 products."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.cslt_pack import cslt_pack, cslt_pack_pair, cslt_pack_reference, layout_matches, packed_numel
from kernels.ops.transposable import transposable_mask
from tests.helpers import rel_err
from tests.kernels.cslt_pack_helpers import CUDA, DTYPES, bits, gated_reference64, rand24


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dname", ["bf16", "fp16"])
def test_gpu_equals_cslt_compress_and_products(dname):
    dt = DTYPES[dname]
    dev = "cuda"
    assert layout_matches(torch.device(dev), dt)
    gen = torch.Generator().manual_seed(11)
    for m, k in ((2048, 512), (96, 256)):
        a = torch.randn(m, k, generator=gen).to(dt).to(dev)
        mask = rand24(m, k, gen, dev)
        am = torch.where(mask, torch.where(a == 0, 1.0, a), 0.0).to(dt)  # kept entries nonzero
        theirs = torch._cslt_compress(am)
        ours = cslt_pack(am, mask)
        n = packed_numel(m, k)  # torch's slack after the metadata is never written
        assert ours.shape == theirs.shape and torch.equal(bits(ours)[:n], bits(theirs)[:n])
        b = torch.randn(k, 128, generator=gen).to(dt).to(dev)
        y = torch._cslt_sparse_mm(ours, b)
        assert rel_err(y, am.double() @ b.double()) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dname", ["bf16", "fp16"])
def test_gpu_repack_pair_values(dname):
    """The compiled values-only refresh at a model shape (both tile widths) equals packing
    afresh, and the refreshed pair multiplies right on cuSPARSELt."""
    from kernels.ops.cslt_pack import cslt_repack_pair_values

    dt = DTYPES[dname]
    gen = torch.Generator(device="cuda").manual_seed(14)
    for r, c in ((1024, 4096), (576, 192)):
        w = torch.randn(r, c, device="cuda", generator=gen)
        mask = transposable_mask(w)
        p, pt = cslt_pack_pair(w, mask, dtype=dt)
        w2 = torch.randn(r, c, device="cuda", generator=gen)
        bits(p)[: r * c // 2] = 0x7FC1
        bits(pt)[: r * c // 2] = 0x7FC1
        cslt_repack_pair_values(w2, p, pt)
        e, et = cslt_pack_pair(w2, mask, dtype=dt)
        assert torch.equal(bits(p), bits(e)) and torch.equal(bits(pt), bits(et))
        b = torch.randn(c, 256, device="cuda", generator=gen).to(dt)
        ref = (w2 * mask).to(dt).double() @ b.double()
        assert rel_err(torch._cslt_sparse_mm(p, b), ref) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_gpu_mvue_pack(dname, layout):
    """Both launch configurations: x row-major (strided MVUE reads) and column-major (rows of
    x^T contiguous, the fst FFN's dH)."""
    from kernels.ops.cslt_pack import cslt_pack_mvue_t
    from kernels.ops.mvue import mvue24_nocheck

    dt = DTYPES[dname]
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(1024, 768, generator=gen).to(dt).cuda()
    if layout == "col":
        x = x.t().contiguous().t()
    seed, seed_ref = torch.tensor([7], dtype=torch.int64, device="cuda"), torch.tensor([7], dtype=torch.int64).cuda()
    keep = torch.empty(768, 1024, dtype=torch.bool, device="cuda")
    g = mvue24_nocheck(x.t().contiguous(), -1, seed_tensor=seed_ref, mask_out=keep)
    ours = cslt_pack_mvue_t(x, seed)
    assert torch.equal(bits(ours).cpu(), bits(cslt_pack_reference(g.cpu(), keep.cpu())))
    b = torch.randn(1024, 256, generator=gen).to(dt).cuda()
    assert rel_err(torch._cslt_sparse_mm(ours, b), g.double() @ b.double()) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("transpose_result", [False, True])
def test_gpu_packed_mm_with_bias(transpose_result):
    """cslt_mm_packed's bias (fused in the epilogue where checked, else added): one value per row
    of A, in both output layouts, vs the float64 product."""
    from kernels.ops.sparse_gemm import cslt_mm_packed

    gen = torch.Generator().manual_seed(17)
    m, k, n = 256, 512, 128
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
    mask = rand24(m, k, gen, "cuda")
    b = torch.randn(k, n, generator=gen).to(torch.bfloat16).cuda()
    bias = torch.randn(m, generator=gen).cuda()  # float32, as an nn.Linear bias
    y = cslt_mm_packed(cslt_pack(a, mask), (m, k), b, transpose_result=transpose_result, bias=bias)
    ref = (a * mask).double() @ b.double() + bias.double()[:, None]
    assert rel_err(y.t() if transpose_result else y, ref) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_gpu_gelu_backward_mvue_pack(dname, layout):
    """The compiled kernel: dh within one ulp of float64 (plus fp32 cancellation), pack ==
    cslt_pack_mvue_t of that dh, and the packed operand multiplies right on cuSPARSELt."""
    from kernels.ops.cslt_pack import cslt_gelu_backward_mvue_pack_t, cslt_pack_mvue_t, cslt_unpack_reference

    dt = DTYPES[dname]
    gen = torch.Generator().manual_seed(17)
    h, g = (torch.randn(1024, 768, generator=gen).to(dt).cuda() for _ in range(2))
    if layout == "col":
        h, g = h.t().contiguous().t(), g.t().contiguous().t()
    seed = torch.tensor([5], dtype=torch.int64, device="cuda")
    dh, packed = cslt_gelu_backward_mvue_pack_t(h, g, seed)
    ref = torch.ops.aten.gelu_backward(g.double(), h.double(), approximate="tanh")
    fi = torch.finfo(dt)  # one ulp (at least the subnormal spacing), plus fp32 cancellation
    tol = fi.eps * ref.abs().clamp_min(fi.tiny) + 1e-5 * g.double().abs()
    assert dh.stride() == h.stride() and ((dh.double() - ref).abs() <= tol).all()
    assert torch.equal(bits(packed), bits(cslt_pack_mvue_t(dh, seed.fill_(5))))
    b = torch.randn(1024, 256, generator=gen).to(dt).cuda()
    dense = cslt_unpack_reference(packed.cpu(), 768, 1024).double()
    assert rel_err(torch._cslt_sparse_mm(packed, b).cpu(), dense @ b.double().cpu()) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("kind", ["geglu", "swiglu"])
def test_gpu_gated_backward_mvue_pack(dname, layout, kind):
    """The compiled kernel: dz within one ulp of float64, every element written (dz starts as
    whatever the allocator hands out; NaN never passes), pack == cslt_pack_mvue_t of that dz, and
    the packed operand multiplies right on cuSPARSELt."""
    from kernels.ops.cslt_pack import cslt_gated_backward_mvue_pack_t, cslt_pack_mvue_t, cslt_unpack_reference

    dt = DTYPES[dname]
    gen = torch.Generator().manual_seed(19)
    z = torch.randn(1024, 2 * 768, generator=gen).to(dt).cuda()
    g = torch.randn(1024, 768, generator=gen).to(dt).cuda()
    if layout == "col":
        z, g = z.t().contiguous().t(), g.t().contiguous().t()
    torch.full((4 << 20,), float("nan"), dtype=dt, device="cuda")  # poison what the allocator reuses
    seed = torch.tensor([5], dtype=torch.int64, device="cuda")
    dz, packed = cslt_gated_backward_mvue_pack_t(z, g, seed, kind)
    ref, tol = gated_reference64(z.cpu(), g.cpu(), kind)
    assert dz.stride() == z.stride() and ((dz.double().cpu() - ref).abs() <= tol).all()
    assert torch.equal(bits(packed), bits(cslt_pack_mvue_t(dz, seed.fill_(5))))
    b = torch.randn(1024, 256, generator=gen).to(dt).cuda()
    dense = cslt_unpack_reference(packed.cpu(), 2 * 768, 1024).double()
    assert rel_err(torch._cslt_sparse_mm(packed, b).cpu(), dense @ b.double().cpu()) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dname", ["bf16", "fp16"])
def test_gpu_pruned_entries_and_decay_cast(dname):
    from kernels.ops.cslt_pack import cslt_decay_cast_pruned, cslt_repack_pair_values, pruned_values_reference

    dt = DTYPES[dname]
    gen = torch.Generator().manual_seed(43)
    w = torch.randn(512, 768, generator=gen).cuda()
    mask = transposable_mask(w)
    p, pt = cslt_pack_pair(w, mask, dtype=dt, check=False)
    pruned = torch.full((512, 384), float("nan"), dtype=dt, device="cuda")
    cslt_repack_pair_values(w, p, pt, pruned)
    assert torch.equal(bits(pruned), bits(pruned_values_reference(w, mask, dt)))
    g = torch.randn(512, 768, generator=gen).to(dt).cuda()
    out = cslt_decay_cast_pruned(g, pruned, p, 0.05)
    assert torch.equal(out, g.float() + 0.05 * torch.where(mask, 0.0, w.to(dt).float()))
