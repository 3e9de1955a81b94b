"""kernels.ops.cslt_pack: our cuSPARSELt packing vs outputs of torch._cslt_compress recorded on an H100
(fixture), the Triton kernel (interpreter) vs the plain-PyTorch reference, bad input, and on a GPU
bit-equality with torch._cslt_compress plus GEMM products."""

from __future__ import annotations

from pathlib import Path

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
from kernels.ops.transposable import transposable_mask
from tests.helpers import rel_err

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cslt_layout_h100.pt"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CUDA = torch.cuda.is_available()


def rand24(m: int, k: int, gen: torch.Generator, device: str = "cpu") -> torch.Tensor:
    idx = torch.rand(m, k // 4, 4, generator=gen).topk(2, -1).indices
    mask = torch.zeros(m, k // 4, 4, dtype=torch.bool).scatter_(-1, idx, True)
    return mask.reshape(m, k).to(device)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.int16)


def _fixture_cases() -> list[dict]:
    return torch.load(FIXTURE, weights_only=False)["cases"]


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


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
def test_pair_packs_weight_and_transpose(dname):
    dt = DTYPES[dname]
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(128, 192, generator=gen)
    mask = transposable_mask(w)
    p, pt = cslt_pack_pair(w, mask, dtype=dt)  # fp32 master weight, packed in dt
    wm = (w * mask).to(dt)
    assert torch.equal(bits(p), bits(cslt_pack_reference(wm, mask)))
    assert torch.equal(bits(pt), bits(cslt_pack_reference(wm.t().contiguous(), mask.t().contiguous())))
    assert torch.equal(cslt_unpack_reference(pt, 192, 128), wm.t())


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(64, 64), (128, 192), (192, 256)])  # 64- and 128-column tiles
@pytest.mark.parametrize("src", ["fp32", "16bit"])
def test_repack_pair_values_equals_packing_afresh(dname, shape, src):
    """The per-step refresh (values from the new weight, kept positions from the pair's own
    metadata) writes what cslt_pack_pair writes for the new weight and the old mask, bit for bit,
    over values poisoned beforehand; the metadata decodes back to the mask."""
    from kernels.ops.cslt_pack import cslt_keep_mask_reference, cslt_pack_pair_into, cslt_repack_pair_values

    dt = DTYPES[dname]
    r, c = shape
    gen = torch.Generator().manual_seed(r * c)
    w = torch.randn(r, c, generator=gen)
    mask = transposable_mask(w)
    p, pt = cslt_pack_pair(w, mask, dtype=dt)
    assert torch.equal(cslt_keep_mask_reference(p, r, c), mask)
    assert torch.equal(cslt_keep_mask_reference(pt, c, r), mask.t())
    w2 = torch.randn(r, c, generator=gen)
    w2[0, :8] = 0.0  # kept zeros stay where the metadata says
    if src == "16bit":
        w2 = w2.to(dt)
    bits(p)[: r * c // 2] = 0x7FC1  # poison: a NaN pattern in every value slot
    bits(pt)[: r * c // 2] = 0x7FC1
    cslt_repack_pair_values(w2, p, pt)
    e, et = cslt_pack_pair(w2.float(), mask, dtype=dt)
    assert torch.equal(bits(p), bits(e)) and torch.equal(bits(pt), bits(et))
    # a new mask goes in place (values and metadata)
    mask2 = transposable_mask(w2.float())
    cslt_pack_pair_into(w2, mask2, p, pt)
    e2, et2 = cslt_pack_pair(w2.float(), mask2, dtype=dt)
    assert torch.equal(bits(p), bits(e2)) and torch.equal(bits(pt), bits(et2))


def test_repack_pair_values_bad_input():
    from kernels.ops.cslt_pack import cslt_pack_pair_into, cslt_repack_pair_values

    gen = torch.Generator().manual_seed(8)
    w = torch.randn(64, 128, generator=gen)
    mask = transposable_mask(w)
    p, pt = cslt_pack_pair(w, mask, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="packed 64x128"):
        cslt_repack_pair_values(w, pt, p)  # swapped
    with pytest.raises(ValueError, match="one dtype"):
        cslt_repack_pair_values(w, p, pt.view(torch.float16))
    with pytest.raises(TypeError, match="float32 or the pair"):
        cslt_repack_pair_values(w.half(), p, pt)
    with pytest.raises(ValueError, match="rows % 64"):
        cslt_repack_pair_values(w[:32], p, pt)
    with pytest.raises(TypeError, match="torch.Tensor"):
        cslt_repack_pair_values(w, p, None)
    with pytest.raises(ValueError, match="contiguous"):
        cslt_repack_pair_values(w, p, pt.t())
    bad = mask.clone()
    bad[0, :4] = True
    with pytest.raises(ValueError, match="not 2:4"):
        cslt_pack_pair_into(w, bad, p, pt)


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


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(64, 32), (128, 96)])
def test_mvue_pack_matches_mvue_then_pack(dname, shape):
    """One pass (MVUE of x^T + transpose + pack) == mvue24_nocheck of the transposed copy, then
    packing with its keep-mask, bit for bit; both advance the seed tensor by one."""
    from kernels.ops.cslt_pack import cslt_pack_mvue_t
    from kernels.ops.mvue import mvue24_nocheck

    dt = DTYPES[dname]
    t, n = shape
    gen = torch.Generator().manual_seed(t + n)
    x = torch.randn(t, n, generator=gen).to(dt)
    x[:8, :4] = 0  # degenerate groups (all zero, single nonzero)
    x[9, 1] = 1.0
    x[10, 2] = 50.0  # a dominant element
    seed = torch.tensor([12345], dtype=torch.int64)
    seed_ref = seed.clone()
    keep = torch.empty(n, t, dtype=torch.bool)
    g = mvue24_nocheck(x.t().contiguous(), -1, seed_tensor=seed_ref, mask_out=keep)
    ours = cslt_pack_mvue_t(x, seed)
    assert torch.equal(bits(ours), bits(cslt_pack_reference(g, keep)))
    assert int(seed) == int(seed_ref) == 12346
    assert torch.equal(cslt_unpack_reference(ours, n, t), g)
    again = cslt_pack_mvue_t(x, seed)  # the next call draws afresh
    assert not torch.equal(bits(again), bits(ours))
    with pytest.raises(ValueError, match="T % 64"):
        cslt_pack_mvue_t(x[:32], seed)


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


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
def test_self_test_of_kernel_paths_passes(dname):
    """The first-use self test (pair through a transposed view, fused MVUE) passes where the
    kernel is right (here: the interpreter), and fails when the kernel's output is corrupted."""
    import kernels.ops.cslt_pack as cp

    g = torch.Generator().manual_seed(0)
    assert cp._self_test_paths(torch.device("cpu"), DTYPES[dname], g)
    real = cp.cslt_pack_mvue_t
    try:
        cp.cslt_pack_mvue_t = lambda x, s: real(x, s).neg()  # noqa: E731 (a corrupted kernel)
        assert not cp._self_test_paths(torch.device("cpu"), DTYPES[dname], g)
    finally:
        cp.cslt_pack_mvue_t = real


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


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_backward_mvue_pack_matches_separate_passes(dname, layout, approximate):
    """One pass (GELU backward, stored, then MVUE of its transpose, packed) == the GELU backward
    (within one ulp of a float64 reference, plus fp32 cancellation) followed by ``cslt_pack_mvue_t`` of what was stored,
    bit for bit; dh keeps h's layout; the seed advances by one, as with the separate pack."""
    from kernels.ops.cslt_pack import cslt_gelu_backward_mvue_pack_t, cslt_pack_mvue_t

    dt = DTYPES[dname]
    t, n = 128, 96
    gen = torch.Generator().manual_seed(31)
    h, g = (torch.randn(t, n, generator=gen).mul(2).to(dt) for _ in range(2))
    g[:4, :8] = 0  # groups with zero gradient (degenerate MVUE groups)
    if layout == "col":
        h, g = h.t().contiguous().t(), g.t().contiguous().t()
    seed, seed_ref = torch.tensor([77]), torch.tensor([77])
    dh, packed = cslt_gelu_backward_mvue_pack_t(h, g, seed, approximate)
    assert dh.stride() == h.stride() and dh.dtype == dt and int(seed) == 78
    ref = torch.ops.aten.gelu_backward(g.double(), h.double(), approximate=approximate)
    # one ulp, plus the fp32 cancellation of 1 + tanh far left (torch's fp32 backward has it too)
    fi = torch.finfo(dt)
    tol = fi.eps * ref.abs().clamp_min(fi.tiny) + 1e-5 * g.double().abs()
    assert torch.isfinite(dh).all() and ((dh.double() - ref).abs() <= tol).all()
    assert rel_err(dh, ref) < (4e-3 if dt == torch.bfloat16 else 5e-4)
    assert torch.equal(bits(packed), bits(cslt_pack_mvue_t(dh, seed_ref)))
    again = cslt_gelu_backward_mvue_pack_t(h, g, seed, approximate)[1]  # draws afresh
    assert not torch.equal(bits(again), bits(packed))


def test_gelu_tanh_derivative_over_the_whole_range():
    """The fused pass's tanh-GELU derivative (one exp2, one division) against the exact value
    (float64 from sigmoids, no cancellation: torch's float64 tanh form loses 1 + tanh far left)
    to one ulp of the 16-bit dtype, from x = -30 to 30 and at huge |x| (gelu' = 1 or 0); +-inf and
    NaN inputs give NaN, as torch's backward does."""
    from kernels.ops.common import use_triton
    from kernels.ops.cslt_pack import cslt_gelu_backward_mvue_pack_t

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    xs = torch.cat([torch.linspace(-30, 30, 64 * 32 - 8), torch.tensor([1e4, -1e4, 1e13, -1e13])])
    xs = torch.cat([xs, torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0])])
    h = xs.to(torch.bfloat16).reshape(64, 32).to(dev)
    if not use_triton(h):
        pytest.skip("the Triton kernel does not run here (the fallback is torch's backward)")
    g = torch.ones_like(h)
    dh = cslt_gelu_backward_mvue_pack_t(h, g, torch.tensor([5], device=dev), "tanh")[0].double().cpu()
    x = h.double().cpu()
    y = (2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)
    p, q = torch.sigmoid(2 * y), torch.sigmoid(-2 * y)
    exact = p * (1 + q * x * (2 * (2 / torch.pi) ** 0.5) * (1 + 3 * 0.044715 * x * x))
    fin = torch.isfinite(x)
    exact[fin & (x.abs() > 1e3)] = (x[fin & (x.abs() > 1e3)] > 0).double()  # sigmoid's 0 * inf
    # one ulp, and an absolute 1e-35: on the GPU, intermediates below fp32's normal range (x near
    # -10, where gelu' ~ 1e-37) flush to zero
    tol = torch.finfo(torch.bfloat16).eps * exact.abs() + 1e-35
    assert ((dh - exact).abs() <= tol)[fin].all()
    assert torch.isnan(dh[~fin]).all()


def test_gelu_backward_mvue_pack_bad_input():
    from kernels.ops.cslt_pack import cslt_gelu_backward_mvue_pack_t

    h = torch.randn(128, 64).to(torch.bfloat16)
    seed = torch.tensor([1])
    with pytest.raises(ValueError, match="approximate"):
        cslt_gelu_backward_mvue_pack_t(h, h.clone(), seed, "erf")
    with pytest.raises(TypeError):
        cslt_gelu_backward_mvue_pack_t(h, h.half(), seed)
    with pytest.raises(TypeError):
        cslt_gelu_backward_mvue_pack_t(h.float(), h.float(), seed)
    with pytest.raises(ValueError, match="shape"):
        cslt_gelu_backward_mvue_pack_t(h, h[:64].clone(), seed)
    with pytest.raises(ValueError, match="layout"):
        cslt_gelu_backward_mvue_pack_t(h, h.t().contiguous().t(), seed)
    with pytest.raises(ValueError, match="layout"):
        cslt_gelu_backward_mvue_pack_t(h[:, ::2], h[:, ::2], seed)
    with pytest.raises(ValueError, match="T % 64"):
        cslt_gelu_backward_mvue_pack_t(h[:32], h[:32], seed)
    with pytest.raises(TypeError, match="seed_tensor"):
        cslt_gelu_backward_mvue_pack_t(h, h.clone(), torch.tensor([1], dtype=torch.int32))


def test_self_test_catches_a_wrong_fused_gelu_pack():
    import kernels.ops.cslt_pack as cp

    g = torch.Generator().manual_seed(0)
    real = cp.cslt_gelu_backward_mvue_pack_t
    try:
        cp.cslt_gelu_backward_mvue_pack_t = lambda h, gr, s, a="tanh": (lambda r: (r[0], r[1].neg()))(real(h, gr, s, a))  # noqa: E731
        assert not cp._self_test_paths(torch.device("cpu"), torch.bfloat16, g)
    finally:
        cp.cslt_gelu_backward_mvue_pack_t = real


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


def _gated_reference64(z: torch.Tensor, g: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated backward in float64 (tanh GELU for GEGLU) and a tolerance: one ulp of the 16-bit
    dtype, plus the fp32 cancellation of 1 + tanh far left (torch's float64 tanh form has it too)."""
    gate, up = z.double().chunk(2, dim=-1)
    gd = g.double()
    if kind == "geglu":
        a = torch.nn.functional.gelu(gate, approximate="tanh")
        dgate = torch.ops.aten.gelu_backward(gd * up, gate, approximate="tanh")
    else:
        a, dgate = torch.nn.functional.silu(gate), torch.ops.aten.silu_backward(gd * up, gate)
    ref = torch.cat([dgate, gd * a], dim=-1)
    fi = torch.finfo(z.dtype)
    scale = gd.abs() * (gate.abs() + up.abs() + 1)
    return ref, fi.eps * ref.abs().clamp_min(fi.tiny) + 1e-5 * torch.cat([scale, scale], dim=-1)


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("kind", ["geglu", "swiglu"])
def test_gated_backward_mvue_pack_matches_separate_passes(dname, layout, kind):
    """One pass (GEGLU / SwiGLU backward, stored, then MVUE of its transpose, packed) == the gated
    backward (within one ulp of a float64 reference) followed by ``cslt_pack_mvue_t`` of what was
    stored, bit for bit; dz keeps z's layout, dz is written everywhere (poisoned buffer check via
    NaN-free output), and the seed advances by one."""
    from kernels.ops.cslt_pack import cslt_gated_backward_mvue_pack_t, cslt_pack_mvue_t

    dt = DTYPES[dname]
    t, r = 128, 128
    gen = torch.Generator().manual_seed(37)
    z = torch.randn(t, 2 * r, generator=gen).mul(2).to(dt)
    g = torch.randn(t, r, generator=gen).to(dt)
    g[:4, :8] = 0  # groups with zero gradient (degenerate MVUE groups), in both halves
    if layout == "col":
        z, g = z.t().contiguous().t(), g.t().contiguous().t()
    seed, seed_ref = torch.tensor([91]), torch.tensor([91])
    dz, packed = cslt_gated_backward_mvue_pack_t(z, g, seed, kind)
    assert dz.stride() == z.stride() and dz.dtype == dt and int(seed) == 92
    ref, tol = _gated_reference64(z, g, kind)
    assert torch.isfinite(dz).all() and ((dz.double() - ref).abs() <= tol).all()
    assert rel_err(dz, ref) < (4e-3 if dt == torch.bfloat16 else 5e-4)
    assert torch.equal(bits(packed), bits(cslt_pack_mvue_t(dz, seed_ref)))
    again = cslt_gated_backward_mvue_pack_t(z, g, seed, kind)[1]  # draws afresh
    assert not torch.equal(bits(again), bits(packed))


def test_gated_backward_reference_matches_autograd():
    """The plain-PyTorch gated backward == autograd through geglu_reference / swiglu_reference."""
    from kernels.ops.cslt_pack import gated_backward_reference
    from kernels.ops.geglu import geglu_reference, swiglu_reference

    gen = torch.Generator().manual_seed(3)
    z = torch.randn(16, 64, generator=gen, requires_grad=True)
    g = torch.randn(16, 32, generator=gen)
    for kind, fn in (("geglu", lambda t: geglu_reference(t, "tanh")), ("swiglu", swiglu_reference)):
        (expect,) = torch.autograd.grad(fn(z), z, g)
        assert rel_err(gated_backward_reference(z.detach(), g, kind, "tanh"), expect) < 1e-6


def test_gated_backward_mvue_pack_bad_input():
    from kernels.ops.cslt_pack import cslt_gated_backward_mvue_pack_t

    z = torch.randn(128, 256).to(torch.bfloat16)
    g = torch.randn(128, 128).to(torch.bfloat16)
    seed = torch.tensor([1])
    with pytest.raises(ValueError, match="kind"):
        cslt_gated_backward_mvue_pack_t(z, g, seed, "reglu")
    with pytest.raises(ValueError, match="approximate"):
        cslt_gated_backward_mvue_pack_t(z, g, seed, "geglu", "erf")
    with pytest.raises(TypeError):
        cslt_gated_backward_mvue_pack_t(z, g.half(), seed)
    with pytest.raises(TypeError):
        cslt_gated_backward_mvue_pack_t(z.float(), g.float(), seed)
    with pytest.raises(ValueError, match="shape"):
        cslt_gated_backward_mvue_pack_t(z, z.clone(), seed)
    with pytest.raises(ValueError, match="column-major"):
        cslt_gated_backward_mvue_pack_t(z, g.t().contiguous().t(), seed)
    with pytest.raises(ValueError, match="T % 64"):
        cslt_gated_backward_mvue_pack_t(z[:32], g[:32], seed)
    with pytest.raises(ValueError, match="r % 64"):
        cslt_gated_backward_mvue_pack_t(z[:, :192].contiguous(), g[:, :96].contiguous(), seed)
    with pytest.raises(TypeError, match="seed_tensor"):
        cslt_gated_backward_mvue_pack_t(z, g, torch.tensor([1], dtype=torch.int32))


def test_self_test_catches_a_wrong_fused_gated_pack():
    import kernels.ops.cslt_pack as cp

    g = torch.Generator().manual_seed(0)
    real = cp.cslt_gated_backward_mvue_pack_t

    def wrong(z, dout, s, kind="geglu", approximate="tanh"):
        dz, packed = real(z, dout, s, kind, approximate)
        return dz, packed.neg()

    try:
        cp.cslt_gated_backward_mvue_pack_t = wrong
        assert not cp._self_test_paths(torch.device("cpu"), torch.bfloat16, g)
    finally:
        cp.cslt_gated_backward_mvue_pack_t = real


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
    ref, tol = _gated_reference64(z.cpu(), g.cpu(), kind)
    assert dz.stride() == z.stride() and ((dz.double().cpu() - ref).abs() <= tol).all()
    assert torch.equal(bits(packed), bits(cslt_pack_mvue_t(dz, seed.fill_(5))))
    b = torch.randn(1024, 256, generator=gen).to(dt).cuda()
    dense = cslt_unpack_reference(packed.cpu(), 2 * 768, 1024).double()
    assert rel_err(torch._cslt_sparse_mm(packed, b).cpu(), dense @ b.double().cpu()) < 1e-2


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
def test_pruned_entries_and_decay_cast_from_them(dname):
    """The values refresh also writes the pruned entries (bit for bit the reference, into a
    poisoned buffer); the decay + cast from them equals fp32(g) + alpha * W16*(~M) exactly, and
    fp32(g) + alpha * W*(~M) of the fp32 weight within the 16-bit rounding of W."""
    from kernels.ops.cslt_pack import cslt_decay_cast_pruned, cslt_repack_pair_values, pruned_values_reference

    dt = DTYPES[dname]
    gen = torch.Generator().manual_seed(41)
    w = torch.randn(128, 192, generator=gen)
    mask = transposable_mask(w)
    p, pt = cslt_pack_pair(w, mask, dtype=dt, check=False)
    w2 = torch.randn(128, 192, generator=gen)
    pruned = torch.full((128, 96), float("nan"), dtype=dt)
    cslt_repack_pair_values(w2, p, pt, pruned)
    assert torch.equal(bits(pruned), bits(pruned_values_reference(w2, mask, dt)))
    g = torch.randn(128, 192, generator=gen).to(dt)
    out = cslt_decay_cast_pruned(g, pruned, p, 0.05)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert torch.equal(out, g.float() + 0.05 * torch.where(mask, 0.0, w2.to(dt).float()))
    exact = g.float() + 0.05 * torch.where(mask, 0.0, w2)
    assert rel_err(out - g.float(), exact - g.float()) < 2 * torch.finfo(dt).eps
    with pytest.raises(ValueError, match="alpha"):
        cslt_decay_cast_pruned(g, pruned, p, float("nan"))
    with pytest.raises(ValueError, match="pruned"):
        cslt_decay_cast_pruned(g, pruned[:, :64].contiguous(), p, 0.1)
    with pytest.raises(ValueError, match="r % 64"):
        cslt_decay_cast_pruned(g[:, :96].contiguous(), pruned, p, 0.1)
    with pytest.raises(ValueError, match="pruned must"):
        cslt_repack_pair_values(w2, p, pt, pruned.t().contiguous())


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
