"""cuSPARSELt operand packing (kernels.ops.cslt_pack) at the figure6 FFN shapes (d = 2048, 8192 tokens):
the MVUE'd gradient [4d, T], the fused MVUE + transpose + pack of dH [T, 4d] (after GELU's or a
gated activation's backward), and the weight pair
(W and W^T from a float32 master weight and its transposable mask). Checked before timing: equal
to the plain-PyTorch reference packing (and, on a GPU, to torch._cslt_compress) bit for bit."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.cslt_pack import (
    cslt_pack,
    cslt_pack_mvue_t,
    cslt_pack_pair,
    cslt_pack_reference,
    packed_numel,
)
from kernels.ops.mvue import mvue24_nocheck
from kernels.ops.transposable import transposable_mask
from tests.benchmarks import DEVICE, ON_GPU, paper_params, run_benchmark

BF = torch.bfloat16
# (id, (rows, cols) on a GPU, tiny on CPU)
GRAD = [("grad-8192x8192", (8192, 8192), (64, 128))]
WEIGHT = [("weight-8192x2048", (8192, 2048), (128, 64))]
GATED_GRAD = [("grad-8192x8192", (8192, 8192), (128, 64))]  # rows = 2r, r % 64 == 0


def _rand24(m: int, k: int, gen: torch.Generator) -> torch.Tensor:
    idx = torch.rand(m, k // 4, 4, device=DEVICE, generator=gen).topk(2, -1).indices
    mask = torch.zeros(m, k // 4, 4, dtype=torch.bool, device=DEVICE).scatter_(-1, idx, True)
    return mask.reshape(m, k)


def _same(a: torch.Tensor, b: torch.Tensor, m: int, k: int) -> bool:
    n = packed_numel(m, k)
    return torch.equal(a.reshape(-1).view(torch.int16)[:n], b.reshape(-1).view(torch.int16)[:n])


@pytest.mark.parametrize("shape", paper_params(GRAD))
def test_cslt_pack(benchmark, shape, copy_gbps):
    m, k = shape
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    mask = _rand24(m, k, gen)
    a = torch.randn(m, k, device=DEVICE, generator=gen).to(BF)
    # kept entries nonzero: randn gives an exact 0 about once per 2**24 draws, and a group with fewer
    # than two nonzeros may be filled differently by cuSPARSELt (same products, other bits)
    a = torch.where(mask, torch.where(a == 0, 1.0, a), 0.0).to(BF)
    out = cslt_pack(a, check=False)
    assert _same(out, cslt_pack_reference(a), m, k)
    if ON_GPU:
        assert _same(out, torch._cslt_compress(a), m, k)
    run_benchmark(
        benchmark, lambda: cslt_pack(a, check=False), nbytes=a.numel() * 2 + packed_numel(m, k) * 2, copy_gbps=copy_gbps
    )


@pytest.mark.parametrize("shape", paper_params(GRAD))
def test_cslt_pack_mvue_t(benchmark, shape, copy_gbps):
    n, t = shape  # packs MVUE(x^T) [n, T] from x [T, n]
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    x = torch.randn(t, n, device=DEVICE, generator=gen).to(BF)
    seed = torch.tensor([99], dtype=torch.int64, device=DEVICE)
    seed_ref = seed.clone()
    keep = torch.empty(n, t, dtype=torch.bool, device=DEVICE)
    g = mvue24_nocheck(x.t().contiguous(), -1, seed_tensor=seed_ref, mask_out=keep)
    out = cslt_pack_mvue_t(x, seed)
    assert _same(out, cslt_pack_reference(g, keep), n, t)
    run_benchmark(
        benchmark, lambda: cslt_pack_mvue_t(x, seed), nbytes=x.numel() * 2 + packed_numel(n, t) * 2, copy_gbps=copy_gbps
    )


@pytest.mark.parametrize("shape", paper_params(WEIGHT))
def test_cslt_pack_pair(benchmark, shape, copy_gbps):
    r, c = shape
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    w = torch.randn(r, c, device=DEVICE, generator=gen)  # float32 master weight
    mask = transposable_mask(w)
    p, pt = cslt_pack_pair(w, mask, dtype=BF, check=False)
    wm = (w * mask).to(BF)
    assert _same(p, cslt_pack_reference(wm, mask), r, c)
    assert _same(pt, cslt_pack_reference(wm.t().contiguous(), mask.t().contiguous()), c, r)
    nbytes = w.numel() * (4 + 1) + 2 * packed_numel(r, c) * 2
    run_benchmark(benchmark, lambda: cslt_pack_pair(w, mask, dtype=BF, check=False), nbytes=nbytes, copy_gbps=copy_gbps)


@pytest.mark.parametrize("shape", paper_params(GRAD))
def test_cslt_gelu_backward_mvue_pack_t(benchmark, shape, copy_gbps):
    """The fst FFN's dH: GELU backward and MVUE + pack of dH^T in one pass, from column-major H
    and dA (the layout the fst FFN keeps)."""
    from kernels.ops.cslt_pack import cslt_gelu_backward_mvue_pack_t

    n, t = shape
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    h = torch.randn(n, t, device=DEVICE, generator=gen).to(BF).t()
    g = torch.randn(n, t, device=DEVICE, generator=gen).to(BF).t()
    seed = torch.tensor([5], dtype=torch.int64, device=DEVICE)
    dh, out = cslt_gelu_backward_mvue_pack_t(h, g, seed.fill_(5))
    assert _same(out, cslt_pack_mvue_t(dh, seed.fill_(5)), n, t)
    nbytes = 3 * h.numel() * 2 + packed_numel(n, t) * 2  # read H, dA; write dH and the operand
    run_benchmark(benchmark, lambda: cslt_gelu_backward_mvue_pack_t(h, g, seed), nbytes=nbytes, copy_gbps=copy_gbps)


@pytest.mark.parametrize("shape", paper_params(GATED_GRAD))
def test_cslt_gated_backward_mvue_pack_t(benchmark, shape, copy_gbps):
    """A GEGLU fst FFN's dZ: the gated backward and MVUE + pack of dZ^T [2r, T] in one pass,
    from column-major Z = [gate, up] and dA (r = half the rows of the GRAD shape)."""
    from kernels.ops.cslt_pack import cslt_gated_backward_mvue_pack_t

    n, t = shape
    gen = torch.Generator(device=DEVICE).manual_seed(6)
    z = torch.randn(n, t, device=DEVICE, generator=gen).to(BF).t()
    g = torch.randn(n // 2, t, device=DEVICE, generator=gen).to(BF).t()
    seed = torch.tensor([5], dtype=torch.int64, device=DEVICE)
    dz, out = cslt_gated_backward_mvue_pack_t(z, g, seed.fill_(5), "geglu", "tanh")
    assert _same(out, cslt_pack_mvue_t(dz, seed.fill_(5)), n, t)
    nbytes = (2 * z.numel() + g.numel()) * 2 + packed_numel(n, t) * 2  # read Z, dA; write dZ and the operand
    run = lambda: cslt_gated_backward_mvue_pack_t(z, g, seed, "geglu", "tanh")  # noqa: E731
    run_benchmark(benchmark, run, nbytes=nbytes, copy_gbps=copy_gbps)


@pytest.mark.parametrize("shape", paper_params(WEIGHT))
def test_cslt_decay_cast_pruned(benchmark, shape, copy_gbps):
    """Masked decay + fp32 cast of a weight gradient from the pruned entries of the refresh."""
    from kernels.ops.cslt_pack import cslt_decay_cast_pruned, cslt_repack_pair_values

    r, c = shape
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    w = torch.randn(r, c, device=DEVICE, generator=gen)
    mask = transposable_mask(w)
    p, pt = cslt_pack_pair(w, mask, dtype=BF, check=False)
    pruned = torch.empty(r, c // 2, device=DEVICE, dtype=BF)
    cslt_repack_pair_values(w, p, pt, pruned)
    g = torch.randn(r, c, device=DEVICE, generator=gen).to(BF)
    out = cslt_decay_cast_pruned(g, pruned, p, 1e-2)
    assert torch.equal(out, g.float() + 1e-2 * torch.where(mask, 0.0, w.to(BF).float()))
    nbytes = r * c * (2 + 1 + 4) + r * c // 8  # read g, pruned, metadata; write fp32
    run_benchmark(benchmark, lambda: cslt_decay_cast_pruned(g, pruned, p, 1e-2), nbytes=nbytes, copy_gbps=copy_gbps)
