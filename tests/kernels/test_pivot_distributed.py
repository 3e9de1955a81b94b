"""Global Top-K pivot search (kernels.ops.pivot) over process groups: every method equals the exact
select of the concatenation over gloo groups of 2 and 4 ranks (and NCCL where there are GPUs), the
ranks agree, communication volumes and rounds, and a NaN on one rank raises on every rank."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels.ops.pivot import find_pivot, find_pivot_stats

pytestmark = pytest.mark.usefixtures("one_thread")

DIST = [("exact", {}), ("radix", {}), ("radix", {"bits": 16}), ("gaussian", {})]

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
