"""Global Top-K pivot search (kernels.ops.pivot), single process: radix and gaussian equal the exact
select on every kind of input and dtype, exact keep counts, rounds and defaults, termination with
tiny budgets, chunked streaming and the histogram select, CUDA equal to CPU, and ties (property
test)."""

from __future__ import annotations

import math
import zlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.ops.pivot as pivot_mod
from kernels.ops.pivot import METHODS, PivotResult, find_pivot, find_pivot_stats

pytestmark = pytest.mark.usefixtures("one_thread")

DENSITIES = [0.0, 1e-4, 0.01, 0.5, 0.9, 1.0]

OTHER = [("radix", {}), ("radix", {"bits": 16}), ("radix", {"bits": 5}), ("gaussian", {})]


def _data(kind: str, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """Three tensors of different shapes (about 60K values) of one distribution."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(96, 320), (25_000,), (7, 11, 13)]
    out = []
    for shape in shapes:
        if kind == "normal":
            x = torch.randn(shape, generator=g) * 0.02
        elif kind == "uniform":
            x = torch.rand(shape, generator=g) * 2 - 1
        elif kind == "cauchy":
            x = torch.empty(shape).cauchy_(generator=g)
        elif kind == "student_t":  # t with 2 degrees of freedom: z / sqrt(chi2_2 / 2), infinite variance
            z = torch.randn(shape, generator=g)
            chi2_over_nu = torch.randn((2, *shape), generator=g).square().mean(0)
            x = z / chi2_over_nu.sqrt() * 1e3
        elif kind == "ties":
            x = torch.randn(shape, generator=g).mul(3).round()
        elif kind == "zeros":
            x = torch.randn(shape, generator=g) * (torch.rand(shape, generator=g) < 0.05)
        else:
            raise AssertionError(kind)
        big = torch.finfo(dtype).max / 2  # heavy tails: stay finite in fp16
        out.append(x.clamp(-big, big).to(dtype))
    return out


@pytest.mark.parametrize("kind", ["normal", "uniform", "cauchy", "student_t", "ties", "zeros"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_methods_equal_exact(kind, dtype):
    ts = _data(kind, dtype, seed=zlib.crc32(f"{kind} {dtype}".encode()))
    n = sum(t.numel() for t in ts)
    mags = torch.cat([t.float().abs().reshape(-1) for t in ts])
    for density in DENSITIES:
        ref = find_pivot_stats(ts, density)
        k = round(density * n)
        assert (ref.k, ref.n, ref.method, ref.rounds, ref.bytes_communicated) == (k, n, "exact", 0, 0)
        if k == 0:
            assert ref.pivot == math.inf
        else:  # the k-th largest, ties or not
            assert int((mags >= ref.pivot).sum()) >= k > int((mags > ref.pivot).sum())
        for method, opts in OTHER:
            r = find_pivot_stats(ts, density, method, **opts)
            assert r.pivot == ref.pivot, (kind, dtype, density, method, opts, r, ref)
            assert (r.k, r.n, r.method, r.bytes_communicated) == (k, n, method, 0)
            assert r.rounds >= 1


def test_keep_count_without_ties():
    g = torch.Generator().manual_seed(7)
    n = 300 * 301 + 5000  # distinct magnitudes (integers times 2**-10, exact in float32), random signs
    w = (torch.randperm(n, generator=g) + 1).float() * 2**-10 * (torch.randint(0, 2, (n,), generator=g) * 2 - 1)
    ts = [w[: 300 * 301].view(300, 301), w[300 * 301 :]]
    mags = torch.cat([t.abs().reshape(-1) for t in ts])
    assert mags.unique().numel() == mags.numel()
    for density in (1e-4, 0.05, 0.5, 0.77, 1.0):
        k = round(density * mags.numel())
        for method in METHODS:
            p = find_pivot(ts, density, method)
            assert int((mags >= p).sum()) == k, (method, density)


def test_single_tensor_rounds_and_defaults():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(3))
    assert isinstance(find_pivot_stats(x, 0.5), PivotResult)
    assert find_pivot_stats(x, 0.5, "radix").rounds == 4  # 8 bits: 31 value bits in 4 passes
    assert find_pivot_stats(x, 0.5, "radix", bits=16).rounds == 2
    r = find_pivot_stats(x, 0.5, "gaussian")
    assert r.rounds <= 4 and 0 < r.candidates <= 4096  # stats, one or two count rounds, the gather
    assert find_pivot(x, 0.0, "gaussian") == math.inf
    assert find_pivot(x, 1.0, "gaussian") == float(x.abs().min())
    assert find_pivot([torch.tensor([-2.0])], 1.0, "gaussian") == 2.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_all_zero_weights(dtype):
    """Every |w| is 0 (the gaussian fit has sigma 0): the pivot is 0 for any k > 0, +inf for k == 0."""
    ts = [torch.zeros(40, 8, dtype=dtype), -torch.zeros(100, dtype=dtype)]
    for method in METHODS:
        for density in (0.3, 1.0):
            r = find_pivot_stats(ts, density, method)
            assert (r.pivot, r.k, r.n) == (0.0, round(density * 420), 420), (method, density)
        assert find_pivot(ts, 0.0, method) == math.inf


def test_gaussian_terminates_with_tiny_budgets():
    g = torch.Generator().manual_seed(11)
    hard = [
        torch.full((4000,), 0.37),
        torch.cat([torch.zeros(50_000), torch.randn(30, generator=g)]),
        torch.tensor([3e38, -3e38, 1e-45, 0.0, 1.0, 1e-45]),
        torch.empty(20_000).cauchy_(generator=g).pow(3).clamp(-1e30, 1e30),
        torch.tensor([0.5]),
    ]
    for x in hard:
        for density in (1e-3, 0.3, 0.5, 1.0):
            ref = find_pivot(x, density)
            for bins in (2, 3, 64):
                r = find_pivot_stats(x, density, "gaussian", bins=bins, max_candidates=1, margin=0.0)
                assert r.pivot == ref and r.rounds < 200


def test_chunked_streaming_and_large_select(monkeypatch):
    """Tiny chunks (many per tensor) and the histogram select that replaces torch's above 2**27
    values: still exact, single process and with compactions across chunks."""
    ts = _data("normal", torch.bfloat16, 5) + _data("cauchy", torch.float32, 6)
    refs = {d: find_pivot(ts, d) for d in (1e-4, 0.5, 1.0)}
    monkeypatch.setitem(pivot_mod._CHUNK, "cpu", 4096)
    monkeypatch.setattr(pivot_mod, "_TORCH_SELECT_MAX", 100)
    for density, ref in refs.items():
        for method, opts in [("exact", {}), *OTHER]:
            assert find_pivot(ts, density, method, **opts) == ref, (density, method, opts)


def test_cuda_paths_on_the_cpu(monkeypatch):
    """What CUDA runs, run here: the sync-free histc counts in place of torch.bincount and small
    tensors joined into one chunk (and, with tiny chunks, split again): still exact."""
    ts = _data("ties", torch.float32, 11) + _data("normal", torch.bfloat16, 12) + _data("zeros", torch.float16, 13)
    refs = {d: find_pivot(ts, d) for d in DENSITIES}
    monkeypatch.setattr(pivot_mod, "_bin_counts", pivot_mod._histc_counts)
    monkeypatch.setattr(pivot_mod, "_JOINED_DEVICES", {"cpu", "cuda"})
    for chunk in (1 << 22, 30_000):
        monkeypatch.setitem(pivot_mod._CHUNK, "cpu", chunk)
        for density, ref in refs.items():
            for method, opts in OTHER:
                assert find_pivot(ts, density, method, **opts) == ref, (chunk, density, method, opts)


def test_histc_counts_equal_bincount():
    g = torch.Generator().manual_seed(3)
    for n, bins in ((1000, 65), (100_000, 256), (5000, 1 << 16), (7, 3)):
        idx = torch.randint(0, bins, (n,), generator=g, dtype=torch.int32)
        idx[0], idx[-1] = 0, bins - 1  # both end bins
        assert torch.equal(pivot_mod._histc_counts(idx, bins), torch.bincount(idx, minlength=bins)), (n, bins)
    one_bin = torch.full(((1 << 24) + 5,), 64, dtype=torch.int32)  # beyond float32's exact counts per call
    counts = pivot_mod._histc_counts(one_bin, 65)
    assert int(counts[64]) == (1 << 24) + 5 and int(counts.sum()) == (1 << 24) + 5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu(monkeypatch):
    for kind in ("normal", "cauchy", "ties"):
        ts = _data(kind, torch.bfloat16, 9)
        cuda = [t.cuda() for t in ts]
        for density in DENSITIES:
            ref = find_pivot(ts, density)
            for method, opts in [("exact", {}), *OTHER]:
                assert find_pivot(cuda, density, method, **opts) == ref, (kind, density, method, opts)
    monkeypatch.setattr(pivot_mod, "_TORCH_SELECT_MAX", 100)  # the histogram select on CUDA
    assert find_pivot(cuda, 0.5) == find_pivot(ts, 0.5)


@settings(max_examples=60, deadline=None)
@given(
    vals=st.lists(st.sampled_from([0.0, 1e-40, 0.25, -0.25, 0.5, 1.0, -3.0, 1e30, 7.5e-3]), min_size=1, max_size=40),
    density=st.floats(0.0, 1.0),
)
def test_property_ties(vals, density):
    x = torch.tensor(vals, dtype=torch.float32)
    ref = find_pivot(x, density)
    assert find_pivot(x, density, "radix") == ref
    assert find_pivot(x, density, "radix", bits=3) == ref
    assert find_pivot(x, density, "gaussian", bins=4, max_candidates=2) == ref
