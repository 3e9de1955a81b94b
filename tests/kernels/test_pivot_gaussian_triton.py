"""The gaussian pivot search's Triton passes (``kernels.ops._pivot_gaussian_triton``) against their
plain-PyTorch references, and the whole search through them against the search through the
references (same pivot, rounds, bytes and candidates). CPU through ``TRITON_INTERPRET=1``; CUDA
too where there is one."""

from __future__ import annotations

import pytest
import torch

import kernels.ops.pivot as pivot_mod
from kernels.ops._pivot_gaussian_triton import (
    above_and_at_triton,
    bin_counts_ge_triton,
    compact_between_triton,
    compact_count_triton,
)
from kernels.ops.pivot import find_pivot_stats

_NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, _NO_CUDA])]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _weights(n: int, dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    """Normal values with zeros, a negative zero, heavy-tailed ones and repeats (ties at edges)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.rand(n, generator=g).pow(3)
    x[::37] = 0.0
    x[1] = -0.0
    x[2::53] = x[3]  # ties
    return x.to(dtype).to(device)


def _edges(mags: torch.Tensor, count: int, seed: int) -> torch.Tensor:
    """``count`` strictly increasing float32 bit patterns, most of them values of ``mags`` (so that
    values sit exactly on edges)."""
    g = torch.Generator().manual_seed(seed)
    picks = mags.cpu()[torch.randint(0, mags.numel(), (4 * count,), generator=g)]
    e = torch.unique(torch.cat([picks, torch.rand(count, generator=g)]))[:count]
    return e.view(torch.int32)


def _reference_counts(mags: torch.Tensor, e_bits: torch.Tensor) -> torch.Tensor:
    e = e_bits.view(torch.float32)
    idx = torch.bucketize(mags.cpu(), e, right=True)
    return torch.bincount(idx, minlength=e.numel() + 1)[1:]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [1, 2, 3, 65, 257])
def test_bin_counts_equal_bucketize(device: str, dtype: torch.dtype, count: int) -> None:
    x = _weights(6001, dtype, device, seed=count)
    mags = x.abs().float()
    e_bits = _edges(mags, count, seed=count + 1)
    got = bin_counts_ge_triton(x, e_bits.to(device))
    assert got.dtype == torch.int64 and got.shape == (e_bits.numel(),)
    assert torch.equal(got.cpu(), _reference_counts(mags, e_bits))


@pytest.mark.parametrize("device", DEVICES)
def test_bin_counts_put_inf_and_nan_last(device: str) -> None:
    x = torch.tensor([0.5, float("inf"), -float("inf"), float("nan"), 2.0, 1.0], device=device)
    e_bits = torch.tensor([0.5, 1.0, 3.0]).view(torch.int32).to(device)
    assert bin_counts_ge_triton(x, e_bits).tolist() == [1, 2, 3]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_compaction_equals_masked_select(device: str, dtype: torch.dtype) -> None:
    chunks = [
        _weights(5000, dtype, device, 1),
        torch.empty(0, dtype=dtype, device=device),
        _weights(1777, dtype, device, 2),
    ]
    mags = torch.cat([c.abs().float() for c in chunks]).cpu()
    lo, hi = (int(b) for b in torch.tensor([0.05, 0.6]).view(torch.int32))
    bits = mags.view(torch.int32)
    want = mags[(bits >= lo) & (bits < hi)]
    got = compact_between_triton(iter(chunks), lo, hi, want.numel() + 3, torch.device(device))
    assert got.dtype == torch.float32 and got.device.type == device
    assert torch.equal(got.cpu().sort().values, want.sort().values)
    with pytest.raises(RuntimeError, match="more than the bound"):
        compact_between_triton(iter(chunks), lo, hi, want.numel() - 1, torch.device(device))
    empty = compact_between_triton(iter([]), lo, hi, 5, torch.device(device))
    assert empty.numel() == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_compact_count_counts_inside_and_above(device: str, dtype: torch.dtype) -> None:
    """The first round's pass: the values inside [lo, hi), their number and the number at or above
    hi; with too little room the counts stay whole and only room's worth of values is written."""
    chunks = [_weights(6000, dtype, device, 4), _weights(2500, dtype, device, 5)]
    mags = torch.cat([c.abs().float() for c in chunks]).cpu()
    lo, hi = (int(b) for b in torch.tensor([0.1, 0.45]).view(torch.int32))
    bits = mags.view(torch.int32)
    inside_ref = mags[(bits >= lo) & (bits < hi)]
    above_ref = int((bits >= hi).sum())
    kept, inside, above = compact_count_triton(iter(chunks), lo, hi, inside_ref.numel(), torch.device(device))
    assert (inside, above) == (inside_ref.numel(), above_ref)
    assert torch.equal(kept.cpu().sort().values, inside_ref.sort().values)
    kept, inside, above = compact_count_triton(iter(chunks), lo, hi, 10, torch.device(device))
    assert (kept.numel(), inside, above) == (10, inside_ref.numel(), above_ref)
    assert bool(torch.isin(kept.cpu(), inside_ref).all())


def _mixture(n: int, seed: int) -> torch.Tensor:
    """Far from one Gaussian: 90% tiny values, 10% large ones (the fit's first interval misses)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    x[: int(0.9 * n)] *= 1e-3
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("passes", ["triton", "torch"])
def test_first_round_paths_give_the_exact_pivot(device: str, passes: str, monkeypatch) -> None:
    """The search's first round keeps only the fit's interval. Its three paths (the pivot lies in
    it; it does but a rank's guess of the room was short, so it compacts again; the fit misses and
    the whole input is streamed on) each give the exact method's pivot, and the same rounds and
    bytes whatever the room."""
    if device == "cpu":
        monkeypatch.setattr(pivot_mod, "_triton_passes", lambda t: passes == "triton")
    elif passes == "torch":
        pytest.skip("the torch passes run on CPU")
    seen: list[tuple[list[int], int]] = []
    first_round = pivot_mod._first_round

    def spy(values, edges, n, h, comm):
        kept, ge = first_round(values, edges, n, h, comm)
        seen.append((ge, kept.numel()))
        return kept, ge

    monkeypatch.setattr(pivot_mod, "_first_round", spy)
    g = torch.Generator().manual_seed(21)
    normal = (torch.randn(40000, generator=g) * 0.02).to(device)
    cases = [(normal, 0.5, True), (normal.bfloat16(), 0.3, True), (_mixture(40000, 3).to(device), 0.5, False)]
    for x, density, fit_holds in cases:
        k = round(density * x.numel())
        want = find_pivot_stats(x, density, "exact").pivot
        seen.clear()
        roomy = find_pivot_stats(x, density, "gaussian")
        assert len(seen) == 1 and (seen[0][0][0] >= k > seen[0][0][-1]) == fit_holds
        with monkeypatch.context() as m:
            m.setattr(pivot_mod, "_first_cap", lambda n_local, n, h: 1)  # every guess short
            short = find_pivot_stats(x, density, "gaussian")
        assert roomy.pivot == short.pivot == want
        assert (roomy.rounds, roomy.bytes_communicated) == (short.rounds, short.bytes_communicated)
        assert roomy.candidates == short.candidates


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_above_and_at(device: str, dtype: torch.dtype) -> None:
    x = _weights(4099, dtype, device, seed=7)
    mags = x.abs().float().cpu()
    for p in (0.0, float(mags[3]), float(mags.max()), float("inf")):
        want = [int((mags > p).sum()), int((mags == p).sum())]
        assert above_and_at_triton(x, p).tolist() == want, p


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_search_same_through_triton(device: str, dtype: torch.dtype, monkeypatch) -> None:
    """The search's result (pivot, k, n, rounds, bytes, candidates) is the same whether its passes
    run through the Triton kernels or the torch references, on fresh inputs of several kinds."""
    g = torch.Generator().manual_seed(11)
    shards = [
        [(torch.randn(96, 64, generator=g) * 0.02).to(dtype).to(device), _weights(3000, dtype, device, 3)],
        [torch.randint(-3, 4, (5000,), generator=g).to(dtype).to(device)],  # heavy ties
        [_weights(9000, dtype, device, 5).pow(3)],
        [_weights(8000, dtype, device, 6)[::3], _weights(3000, dtype, device, 8).view(60, 50).t()],  # strided
    ]
    for ts in shards:
        for density in (0.0, 0.02, 0.5, 0.9, 1.0):
            for max_candidates in (4096, 32):

                def run(ts=ts, density=density, max_candidates=max_candidates):
                    return find_pivot_stats(ts, density, "gaussian", max_candidates=max_candidates)

                with monkeypatch.context() as m:
                    m.setattr(pivot_mod, "_triton_passes", lambda t: True)
                    fast = run()
                with monkeypatch.context() as m:
                    m.setattr(pivot_mod, "_triton_passes", lambda t: False)
                    ref = run()
                assert fast == ref, (density, max_candidates)
