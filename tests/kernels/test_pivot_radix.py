"""Device radix pivot (kernels.ops.pivot_radix): the pivot and tie share equal the exact select
(find_pivot(method="exact") and tie_share) on fresh random inputs for fp32/bf16/fp16, many tensors,
heavy ties, zeros, empty shards and densities 0..1, through the Triton kernels (interpreter here,
CUDA in the GPU run) and the plain-PyTorch passes; over gloo groups of 2 and 4 ranks every rank
gets the exact pivot of the concatenation; NaN/Inf on any rank raises on every rank."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels.ops.common import triton_interpret
from kernels.ops.flex import tie_share
from kernels.ops.pivot import find_pivot
from kernels.ops.pivot_radix import EQ, GT, NONFINITE, RadixPivot, radix_pivot_and_tie

pytestmark = pytest.mark.usefixtures("one_thread")

DENSITIES = [0.0, 1e-3, 0.3, 0.5, 0.999, 1.0]


def _cases(seed: int) -> dict[str, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return {
        "fp32_two": [torch.randn(300, 70, generator=g) * 0.02, torch.randn(5000, generator=g)],
        "bf16": [torch.randn(64, 64, generator=g).bfloat16(), torch.randn(1000, generator=g).bfloat16()],
        "fp16_ties": [torch.empty(20_000).cauchy_(generator=g).round().clamp(-6e4, 6e4).half()],
        "zeros_ones": [torch.zeros(100), torch.ones(50), torch.empty(0, 3)],
        "eleven_tensors": [torch.randn(10 + i, generator=g) for i in range(11)],  # > 8 per launch
        "subnormal_neg": [torch.randn(4000, generator=g) * 1e-40, -torch.rand(300, generator=g)],
    }


def _want(ts: list[torch.Tensor], density: float) -> tuple[float, float]:
    p = find_pivot(ts, density, method="exact")
    t = tie_share(ts, p, density) if math.isfinite(p) else 1.0
    return p, float(torch.tensor(t, dtype=torch.float32))


def _devices() -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


@pytest.mark.parametrize("path", ["kernels", "torch"])
@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("case", list(_cases(0)))
def test_exact_select(case, device, path):
    if path == "torch" and device == "cuda":
        pytest.skip("the plain-PyTorch passes are the CPU path")
    ts = [t.to(device) for t in _cases(1)[case]]
    for density in DENSITIES:
        r = RadixPivot(ts, density)
        if path == "torch":
            r._triton = False
        r.state.fill_(float("nan"))  # poisoned: the call must write both values
        r.counts.fill_(-7)  # and start from clean bins
        r.pivot()
        got = r.read()
        assert got == _want([t.cpu() for t in ts], density), (case, density)
        if r.k:
            flat = torch.cat([t.reshape(-1).float().abs().cpu() for t in ts])
            gt, eq = int((flat > got[0]).sum()), int((flat == got[0]).sum())
            assert r.counts[[GT, EQ, NONFINITE]].tolist() == [gt, eq, 0]


@pytest.mark.parametrize("device", _devices())
def test_repeat_and_update_in_place(device):
    w = torch.randn(257, 33, device=device)
    r = RadixPivot([w], 0.5)
    for step in range(3):  # the tensors are read in place: updates show in the next call
        r.pivot()
        assert r.read() == _want([w.cpu()], 0.5), step
        w.mul_(-1.5).add_(0.01)


def test_refuses_non_contiguous_and_one_shot_reads_it():
    """A non-contiguous tensor would be read through a copy made at set-up, so in-place updates
    would never show (a stale pivot, silently): the class refuses it; the one-shot reads a copy."""
    w = torch.randn(64, 32).t()
    with pytest.raises(ValueError, match="not contiguous"):
        RadixPivot([w], 0.5)
    assert radix_pivot_and_tie(w, 0.5) == _want([w.contiguous()], 0.5)


def test_paths_agree():
    """The plain-PyTorch passes and the kernels (interpreter or CUDA) give the same counts."""
    if not (triton_interpret() or torch.cuda.is_available()):
        pytest.skip("needs Triton: CUDA or TRITON_INTERPRET=1")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ts = [t.to(dev) for t in _cases(2)["fp16_ties"] + _cases(2)["fp32_two"][:1]]
    ts = [t.float() for t in ts]
    k = RadixPivot(ts, 0.4)
    assert k._triton
    k.pivot()
    ref = RadixPivot([t.cpu() for t in ts], 0.4)
    ref._triton = False
    ref.pivot()
    assert torch.equal(k.counts.cpu()[:NONFINITE], ref.counts[:NONFINITE])
    assert k.read() == ref.read()


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_raises(bad, device):
    w = torch.randn(100, device=device)
    w[7] = bad
    r = RadixPivot(w, 0.5)
    r.pivot()  # never syncs: the count waits in counts[NONFINITE]
    with pytest.raises(ValueError, match="NaN or Inf"):
        r.check()
    with pytest.raises(ValueError, match="NaN or Inf"):
        radix_pivot_and_tie(w.bfloat16(), 0.5)


@pytest.mark.parametrize(
    "args, err",
    [
        (([], 0.5), ValueError),
        (([torch.randn(4)], 1.5), ValueError),
        (([torch.randn(4)], float("nan")), ValueError),
        (([torch.randn(4)], True), ValueError),
        (([torch.arange(4)], 0.5), TypeError),
        (([torch.randn(4), torch.randn(4).half()], 0.5), TypeError),
        (([torch.empty(0)], 0.5), ValueError),
        (([torch.randn(4)], 0.5, "world"), TypeError),
    ],
)
def test_bad_input(args, err):
    with pytest.raises(err):
        RadixPivot(*args)


def _shards(rank: int, world: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 * world + rank)
    if rank == world - 1:  # the last rank holds nothing of the second weight
        return [torch.randn(40 + rank, 50, generator=g), torch.empty(0)]
    return [torch.randn(40 + rank, 50, generator=g), torch.empty(3000).cauchy_(generator=g).round().half().float()]


def _worker(rank: int, world: int, tmp: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=world)
    try:
        out = {str(d): radix_pivot_and_tie(_shards(rank, world), d, dist.group.WORLD) for d in DENSITIES}
        x = torch.randn(1000)
        if rank == 0:
            x[3] = float("nan")
        try:
            radix_pivot_and_tie(x, 0.5, dist.group.WORLD)
            out["nan"] = "no error"
        except ValueError as e:
            out["nan"] = str(e)
        with open(os.path.join(tmp, f"rank{rank}.json"), "w") as fh:
            json.dump(out, fh)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_distributed_gloo(tmp_path, world):
    mp.spawn(_worker, args=(world, str(tmp_path)), nprocs=world, join=True)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    assert all(g == got[0] for g in got[1:]), "ranks disagree"
    assert "NaN or Inf" in got[0]["nan"]
    full = [t for r in range(world) for t in _shards(r, world)]
    for d in DENSITIES:
        assert tuple(got[0][str(d)]) == _want(full, d), d
