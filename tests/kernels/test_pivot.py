"""Global Top-K pivot search (kernels.ops.pivot): radix and gaussian equal the exact select on every
kind of input, single process and over gloo process groups of 2 and 4 ranks."""

from __future__ import annotations

import json
import math
import os
import zlib

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.ops.pivot as pivot_mod
from kernels.ops.pivot import METHODS, PivotResult, find_pivot, find_pivot_stats

DENSITIES = [0.0, 1e-4, 0.01, 0.5, 0.9, 1.0]


@pytest.fixture(autouse=True)
def _one_thread():
    """Small inputs: one intra-op thread (spinning OpenMP threads crawl on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


OTHER = [("radix", {}), ("radix", {"bits": 16}), ("radix", {"bits": 5}), ("gaussian", {})]
DIST = [("exact", {}), ("radix", {}), ("radix", {"bits": 16}), ("gaussian", {})]


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


@pytest.mark.parametrize("method", METHODS)
def test_errors(method):
    x = torch.randn(100)
    for bad in (-0.1, 1.5, float("nan"), float("inf"), "0.5", None, True):
        with pytest.raises(ValueError, match="density"):
            find_pivot(x, bad, method)
    for v in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[17] = v
        with pytest.raises(ValueError, match="NaN or Inf"):
            find_pivot([torch.randn(3), y], 0.5, method)
    with pytest.raises(ValueError, match="empty"):
        find_pivot([], 0.5, method)
    with pytest.raises(ValueError, match="empty"):
        find_pivot([torch.empty(0), torch.empty(0, 3)], 0.5, method)
    for dt in (torch.float64, torch.int32, torch.bool):
        with pytest.raises(TypeError, match="dtype"):
            find_pivot(torch.zeros(4, dtype=dt), 0.5, method)
    with pytest.raises(TypeError):
        find_pivot([x, "w"], 0.5, method)
    with pytest.raises(TypeError, match="options"):
        find_pivot(x, 0.5, method, nonsense=1)


def test_bad_method_and_options():
    x = torch.randn(100)
    with pytest.raises(ValueError, match="unknown method"):
        find_pivot(x, 0.5, "sort")
    with pytest.raises(ValueError, match="bits"):
        find_pivot(x, 0.5, "radix", bits=0)
    with pytest.raises(ValueError, match="bits"):
        find_pivot(x, 0.5, "radix", bits=17)
    with pytest.raises(ValueError, match="bins"):
        find_pivot(x, 0.5, "gaussian", bins=1)
    with pytest.raises(ValueError, match="max_candidates"):
        find_pivot(x, 0.5, "gaussian", max_candidates=0)
    with pytest.raises(ValueError, match="margin"):
        find_pivot(x, 0.5, "gaussian", margin=-1.0)
    with pytest.raises(TypeError, match="options"):
        find_pivot(x, 0.5, "exact", bits=8)


# ----------------------------------------------------------------------------- distributed (gloo)

CASES = {
    # name: (densities, per-rank tensors)
    "normal_uneven": [0.0, 1e-3, 0.5, 1.0],
    "fp32_big": [0.1, 0.5],
    "bf16_big": [0.1, 0.5],
    "heavy_ties": [0.01, 0.5],
    "one_empty": [0.3],
}


def _shards(case: str, rank: int, world: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * world + 10 * rank + len(case))
    if case == "normal_uneven":  # shard sizes differ by rank
        return [torch.randn(40 + 13 * rank, 50, generator=g), torch.randn(3000 * (rank + 1), generator=g)]
    if case in ("fp32_big", "bf16_big"):  # >= 1M values in total
        per = (1 << 20) // world
        x = torch.randn(per // 4, 4, generator=g) * 0.02
        return [x.bfloat16() if case == "bf16_big" else x]
    if case == "heavy_ties":
        return [torch.empty(20_000 + 777 * rank).cauchy_(generator=g).round().clamp(-6e4, 6e4).half()]
    if case == "one_empty":  # the last rank holds nothing
        n = 0 if rank == world - 1 else 5000
        return [torch.randn(n, generator=g), torch.empty(0, 4)]
    raise AssertionError(case)


def _worker(rank: int, world: int, tmp: str, backend: str) -> None:
    if backend == "nccl":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        kw = {"device_id": device}
    else:
        torch.set_num_threads(1)
        device, kw = torch.device("cpu"), {}
    dist.init_process_group(backend, init_method=f"file://{tmp}/pg", rank=rank, world_size=world, **kw)
    try:
        out = {}
        for case, densities in CASES.items():
            ts = [t.to(device) for t in _shards(case, rank, world)]
            for density in densities:
                for method, opts in DIST:
                    r = find_pivot_stats(ts, density, method, dist.group.WORLD, **opts)
                    key = f"{case}|{density}|{method}|{opts.get('bits', '')}"
                    out[key] = [r.pivot, r.k, r.n, r.rounds, r.bytes_communicated, r.candidates]
        # NaN on one rank only: every rank raises (no rank is left waiting in a collective)
        errs = {}
        for method, opts in [*DIST, ("radix", {"bits": 5})]:
            x = torch.randn(1000, device=device)
            if rank == world - 1:
                x[5] = float("nan")
            try:
                find_pivot(x, 0.5, method, dist.group.WORLD, **opts)
                errs[f"{method}{opts}"] = "no error"
            except ValueError as e:
                errs[f"{method}{opts}"] = str(e)
        out["errors"] = errs
        with open(os.path.join(tmp, f"rank{rank}.json"), "w") as fh:
            json.dump(out, fh)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_distributed_gloo(tmp_path, world):
    _check_distributed(tmp_path, world, "gloo")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 CUDA GPUs (NCCL over several ranks)")
def test_distributed_nccl(tmp_path):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    _check_distributed(tmp_path, min(4, torch.cuda.device_count()), "nccl")


def _check_distributed(tmp_path, world: int, backend: str) -> None:
    mp.spawn(_worker, args=(world, str(tmp_path), backend), nprocs=world, join=True)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    for r in range(1, world):
        assert got[r] == got[0], "ranks disagree"
    res = got[0]
    assert len(res["errors"]) == 5
    for method, err in res["errors"].items():
        assert "NaN or Inf" in err, (method, err)
    for case, densities in CASES.items():
        full = [t for r in range(world) for t in _shards(case, r, world)]
        n = sum(t.numel() for t in full)
        for density in densities:
            ref = find_pivot(full, density)  # single process over the concatenation
            for method, opts in DIST:
                pivot, k, nn, rounds, nbytes, cand = res[f"{case}|{density}|{method}|{opts.get('bits', '')}"]
                assert (pivot, k, nn) == (ref, round(density * n), n), (case, density, method, opts)
                assert rounds >= 1 and nbytes > 0
            exact = res[f"{case}|{density}|exact|"]
            if density > 0:  # sizes, then the float32 values padded to the largest shard
                width = max(sum(x.numel() for x in _shards(case, r, world)) for r in range(world))
                assert exact[3] == 2 and exact[4] == world * 16 + world * width * 4
            gauss = res[f"{case}|{density}|gaussian|"]
            if case == "fp32_big":
                assert exact[4] >= 100 * gauss[4], (exact, gauss)
                assert gauss[3] <= 4  # statistics, one or two count rounds, the gather
            if case == "bf16_big":  # ~1300 copies of each bf16 value near the pivot: more candidates
                assert exact[4] >= 50 * gauss[4], (exact, gauss)
            radix = res[f"{case}|{density}|radix|"]
            # 31 value bits: 8 + 8 + 8 + 7; k == 0 is known after the first pass
            assert radix[3:5] == ([4, (3 * 256 + 128) * 8] if density > 0 else [1, 256 * 8])


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
    old = _pivot_triton._MAX_PROGRAMS, _pivot_triton._BLOCK
    _pivot_triton._MAX_PROGRAMS, _pivot_triton._BLOCK = 2, 1024
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
        _pivot_triton._MAX_PROGRAMS, _pivot_triton._BLOCK = old


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_pivot_and_tie_16bit_refuses_nonfinite(bad):
    from kernels.ops.pivot import pivot_and_tie_16bit, pivot_and_tie_16bit_reference

    t = torch.randn(4096).to(torch.bfloat16)
    t[17] = bad
    for fn in (pivot_and_tie_16bit, pivot_and_tie_16bit_reference):
        with pytest.raises(ValueError, match="NaN or Inf"):
            fn([t], 0.5)


def test_pivot_and_tie_16bit_bad_input():
    from kernels.ops.pivot import pivot_and_tie_16bit

    with pytest.raises(TypeError, match="bf16 or fp16"):
        pivot_and_tie_16bit([torch.randn(8)], 0.5)
    with pytest.raises(TypeError, match="share one dtype"):
        pivot_and_tie_16bit([torch.randn(8).half(), torch.randn(8).bfloat16()], 0.5)
    for d in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="density"):
            pivot_and_tie_16bit([torch.randn(8).half()], d)


def _device_select(ts: list[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Both histogram passes, then the device select: (state [pivot, tie], counts)."""
    from kernels.ops._pivot_triton import COUNTS_LEN, hist16_counts, select16

    counts = torch.zeros(COUNTS_LEN, dtype=torch.int64)
    counts[:384] = hist16_counts(ts, k)
    state = torch.full((2,), float("nan"))
    select16(counts, state, k, ts[0].dtype, clear=True)
    return state, counts


def _cases(dtype: torch.dtype) -> list[tuple[list[torch.Tensor], int]]:
    g = torch.Generator().manual_seed(11)
    out = []
    for i in range(24):  # random sizes, scales and densities; every other one heavily tied
        n = int(torch.randint(1, 2000, (1,), generator=g))
        scale = float(10 ** torch.randint(-6, 3, (1,), generator=g))
        x = torch.randn(n, generator=g) * scale
        x = (x * 4).round() / 4 if i % 2 else x
        out.append(([x.to(dtype)], int(torch.randint(1, n + 1, (1,), generator=g))))
    x = torch.randn(777, generator=g).to(dtype)
    out += [([x], 1), ([x], 777), ([x, -x[:5]], 782)]  # k edge cases
    out += [([torch.zeros(64, dtype=dtype)], 10), ([torch.full((50,), -1.5, dtype=dtype)], 7)]  # all tied
    tiny = torch.tensor([1, 2, 3, 0x80, 0x81], dtype=torch.int16).view(dtype)  # subnormals, bucket 0 and 1
    out += [([tiny], k) for k in range(1, 6)]
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_select_kernel_equals_host_select(dtype):
    """Pivot, tie share (as float32, bit for bit) and counts of the device select == the host's."""
    from kernels.ops._pivot_triton import EQ, GT, NONFINITE, hist16_counts
    from kernels.ops.flex import tie_share
    from kernels.ops.pivot import _select_from_counts

    for ts, k in _cases(dtype):
        state, counts = _device_select(ts, k)
        hist = hist16_counts(ts, k)
        piv, tie = _select_from_counts(hist[:256].tolist(), hist[256:].tolist(), k, dtype)
        assert state[0].item() == piv, (k, state, piv)
        assert state[1].view(torch.int32).item() == torch.tensor([tie]).view(torch.int32).item(), (k, state, tie)
        mags = torch.cat([t.float().abs() for t in ts])
        assert counts[GT].item() == int((mags > piv).sum()) and counts[EQ].item() == int((mags == piv).sum())
        assert counts[NONFINITE].item() == 0
        assert not counts[:384].any(), "clear=True must zero the bins"
        n = mags.numel()
        assert piv == find_pivot(ts, k / n) and tie == pytest.approx(tie_share(ts, piv, k / n), abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_select_kernel_k_zero_and_no_clear(dtype):
    from kernels.ops._pivot_triton import COUNTS_LEN, hist16_counts, select16

    x = torch.randn(300).to(dtype)
    counts = torch.zeros(COUNTS_LEN, dtype=torch.int64)
    counts[:384] = hist16_counts([x], 0)
    before = counts[:384].clone()
    state = torch.zeros(2)
    select16(counts, state, 0, dtype)  # k == 0 keeps nothing: +inf, tie 1 (as pivot_and_tie_16bit)
    assert state.tolist() == [math.inf, 1.0]
    assert torch.equal(counts[:384], before), "clear=False must leave the bins"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "-nan"])
def test_select_kernel_counts_nonfinite(dtype, bad):
    from kernels.ops._pivot_triton import NONFINITE, hist16_counts
    from kernels.ops.pivot import _nonfinite_from_high

    x = torch.randn(1000).to(dtype)
    x[[3, 500, 999]] = float("nan") if bad == "-nan" else bad
    if bad == "-nan":
        x[3] = -x[3]  # sign bit set: still a NaN magnitude
    x[7] = torch.finfo(dtype).max  # the largest finite value must not count
    state, counts = _device_select([x], 400)
    assert counts[NONFINITE].item() == 3 == _nonfinite_from_high(hist16_counts([x], 400)[:256].tolist(), dtype)
    state, counts = _device_select([torch.randn(1000).to(dtype)], 400)
    assert counts[NONFINITE].item() == 0


def test_select_kernel_bad_input():
    from kernels.ops._pivot_triton import COUNTS_LEN, select16

    good = torch.zeros(COUNTS_LEN, dtype=torch.int64)
    with pytest.raises(ValueError, match="int64"):
        select16(torch.zeros(COUNTS_LEN, dtype=torch.int32), torch.zeros(2), 1, torch.bfloat16)
    with pytest.raises(ValueError, match="int64"):
        select16(torch.zeros(10, dtype=torch.int64), torch.zeros(2), 1, torch.bfloat16)
    with pytest.raises(ValueError, match="float32"):
        select16(good, torch.zeros(2, dtype=torch.float64), 1, torch.bfloat16)
    with pytest.raises(TypeError, match="bf16 or fp16"):
        select16(good, torch.zeros(2), 1, torch.float32)
