"""kernels.ops.cslt_pack, the weight pair: packing W and W^T together, the per-step values-only
refresh (and a new mask in place), its bad input, and the pruned entries with the decay + cast
computed from them."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.cslt_pack import cslt_pack_pair, cslt_pack_reference, cslt_unpack_reference
from kernels.ops.transposable import transposable_mask
from tests.helpers import rel_err
from tests.kernels.cslt_pack_helpers import DTYPES, bits


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


@pytest.mark.parametrize("dname", ["bf16", "fp16"])
def test_plain_pytorch_fallbacks_equal_the_kernels(dname, monkeypatch):
    """Where Triton does not run (CPU without the interpreter), the pair packing, the in-place
    repack with a new mask, the values-only refresh (with the pruned entries) and the decay + cast
    fall back to the references: the same bits as the kernels, into buffers poisoned first."""
    import kernels.ops.cslt_pack as cp

    dt = DTYPES[dname]
    gen = torch.Generator().manual_seed(43)
    w, w2 = torch.randn(64, 128, generator=gen), torch.randn(64, 128, generator=gen)
    mask, mask2 = transposable_mask(w), transposable_mask(w2)
    g = torch.randn(64, 128, generator=gen).to(dt)

    def run():
        p, pt = cp.cslt_pack_pair(w, mask, dtype=dt)
        first = bits(p).clone(), bits(pt).clone()
        bits(p).fill_(0x7FC1), bits(pt).fill_(0x7FC1)
        cp.cslt_pack_pair_into(w2, mask2, p, pt)
        into = bits(p).clone(), bits(pt).clone()
        pruned = torch.full((64, 64), float("nan"), dtype=dt)
        cp.cslt_repack_pair_values(w, p, pt, pruned)
        refreshed = bits(p).clone(), bits(pt).clone(), bits(pruned)
        return first, into, refreshed, cp.cslt_decay_cast_pruned(g, pruned, p, 0.1)

    kernel = run()
    monkeypatch.setattr(cp, "use_triton", lambda t: False)
    plain = run()
    for a, b in zip(kernel[:3], plain[:3], strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert torch.equal(kernel[3], plain[3]) and torch.isfinite(plain[3]).all()
    assert torch.equal(plain[2][2], bits(cp.pruned_values_reference(w, mask2, dt)))


def test_pair_entry_points_need_a_mask_and_a_matching_pack():
    from kernels.ops.cslt_pack import cslt_decay_cast_pruned, cslt_pack_pair_into

    gen = torch.Generator().manual_seed(44)
    w = torch.randn(64, 128, generator=gen)
    p, pt = cslt_pack_pair(w, transposable_mask(w), dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="needs the transposable mask"):
        cslt_pack_pair(w, None, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="needs the transposable mask"):
        cslt_pack_pair_into(w, None, p, pt)
    g = torch.randn(64, 128, generator=gen).to(torch.bfloat16)
    pruned = torch.zeros(64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="packed must be pack"):
        cslt_decay_cast_pruned(g, pruned, p[:32], 0.1)
    with pytest.raises(ValueError, match="packed must be pack"):
        cslt_decay_cast_pruned(g, pruned, p.view(torch.float16), 0.1)
