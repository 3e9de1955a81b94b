"""FAST Sec. III (Fig. 2b): communication and time of the global pivot search over sharded
weights: the all-gather baseline ("exact"), an all-reduced radix histogram select ("radix") and
FAST's distribution-aware search ("gaussian"), at world sizes 1, 2 and 4.

Data (per rank, bf16, N(0, 0.02^2), a rank-specific seed): Llama-2 13B transformer blocks
sharded tensor-parallel: per block q, k, v, o (5120x5120) and gate, up (13824x5120), down
(5120x13824); q, k, v, gate, up split by rows, o and down by columns. The full profile uses
as many blocks as keep the all-gather baseline under ~40% of one GPU's memory at world size 1
(~10 bytes per value: the bf16 shard, the float32 send buffer, the gathered float32 copy), at
most 40 (the model's depth); the same total at every world size (strong scaling). The smoke
profile: one block of hidden 64, FFN 256 (65,536 values), gloo processes on the CPU.
Rows: ``variant`` = "world=<W>", ``shape`` = "<W>x<values per rank>".

Every world size runs in its own processes (one per GPU with NCCL, or gloo on the CPU), spawned
by torch.multiprocessing; rank 0 writes the results to a file that the parent reads. Before any
timing, every method's pivot is checked on every rank: #(|w| >= p) >= k > #(|w| > p) over all
ranks (what makes p the k-th largest), the same p on all ranks, and p equal to the baseline's
(and, in the smoke profile, to the single-process pivot over the concatenated shards).
Time: per call, ranks start together (a tiny all-reduce); CUDA events (or the host clock on the
CPU) around the call; the max over ranks per repetition; the median over repetitions.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels.ops.pivot import find_pivot, find_pivot_stats
from repro.suite import RunContext, num
from suites._common import Verdict

NAME = "pivot_comm"
PAPER = "fast"
ARTIFACT = "pivot_comm"
TITLE = "FAST Sec. III: pivot search communication and time"
CHECKS = (
    "every method gives the same pivot on every rank, equal to the all-gather baseline's",
    "the pivot keeps the k largest |w| (a direct count on the shards)",
    "the distributed pivot equals the single-process pivot of the same values",
)

METHODS = {
    "exact": "all-gather every shard's float32 |w|, then select (baseline)",
    "radix": "histogram select on float32 bits, 4 all-reduces of 256 counts",
    "gaussian": "FAST: Gaussian fit, equal-frequency bins, all-reduced counts, gather the last candidates",
}
BASELINE = "exact"
DENSITY = 0.5  # fraction of weights kept (50% sparsity)
WORLDS = (1, 2, 4)
FULL = {"hidden": 5120, "ffn": 13824}
SMOKE = {"hidden": 64, "ffn": 256, "blocks": 1}
BYTES_PER_VALUE = 10  # at world 1: bf16 shard + float32 send buffer + gathered float32 copy
MEMORY_FRACTION = 0.4
RESERVE_BYTES = 1 << 30  # temporaries (chunks of 2**26 values), NCCL buffers
MAX_BLOCKS = 40  # Llama-2 13B has 40 blocks
STD = 0.02
PAPER_NOTE = "qualitative (Fig. 2b)"


def block_values(hidden: int, ffn: int) -> int:
    return 4 * hidden * hidden + 3 * hidden * ffn


def full_blocks(total_memory: int) -> int:
    """Blocks of the full profile for a GPU of ``total_memory`` bytes (world size 1 is the worst)."""
    budget = MEMORY_FRACTION * total_memory - RESERVE_BYTES
    return max(1, min(MAX_BLOCKS, int(budget // (BYTES_PER_VALUE * block_values(**FULL)))))


def shard_shapes(hidden: int, ffn: int, world: int) -> list[tuple[int, int]]:
    """One block's tensor-parallel shards: q, k, v, o, gate, up, down as [out, in] per rank."""
    if hidden % world or ffn % world:
        raise ValueError(f"hidden {hidden} and FFN {ffn} must be divisible by the world size {world}")
    h, f = hidden // world, ffn // world
    return [(h, hidden)] * 3 + [(hidden, h), (f, hidden), (f, hidden), (hidden, f)]


def make_shards(cfg: dict, rank: int, world: int, device: torch.device) -> list[torch.Tensor]:
    """This rank's bf16 weights: ``cfg['blocks']`` blocks, seeded by rank (deterministic)."""
    gen = torch.Generator(device=device).manual_seed(1234 + rank)
    out = []
    for _ in range(cfg["blocks"]):
        for shape in shard_shapes(cfg["hidden"], cfg["ffn"], world):
            out.append(torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16).mul_(STD))
    return out


# ----------------------------------------------------------------------------- worker


def _sync(device: torch.device) -> None:
    t = torch.zeros(1, device=device)
    dist.all_reduce(t)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_ms(fn, device: torch.device, warmup: int, reps: int) -> float:
    """Median over repetitions of the slowest rank's time of ``fn`` (all ranks start together)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        _sync(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    worst = torch.tensor(samples, dtype=torch.float64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return statistics.median(worst.tolist())


def _count_check(shards: list[torch.Tensor], pivot: float, k: int, device: torch.device) -> bool:
    """#(|w| >= pivot) >= k > #(|w| > pivot), counted over every rank."""
    c = torch.zeros(2, dtype=torch.int64, device=device)
    for t in shards:
        a = t.float().abs()
        c += torch.stack([(a >= pivot).sum(), (a > pivot).sum()])
    dist.all_reduce(c)
    ge, gt = c.tolist()
    return ge >= k > gt


def _worker(rank: int, world: int, cfg: dict, tmp: str) -> None:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    nccl = cfg["backend"] == "nccl"
    if nccl:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=f"file://{tmp}/pg", rank=rank, world_size=world, device_id=device)
    else:
        torch.set_num_threads(1)  # ranks share the host's cores
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=world)
    try:
        group = dist.group.WORLD
        shards = make_shards(cfg, rank, world, device)
        n_local = sum(t.numel() for t in shards)
        res: dict = {"n_per_rank": n_local, "methods": {}}
        for method in METHODS:  # correctness first (with the NaN/Inf check)
            r = find_pivot_stats(shards, cfg["density"], method, group)
            pivots = torch.zeros(world, dtype=torch.float64, device=device)
            pivots[rank] = r.pivot
            dist.all_reduce(pivots)
            res["methods"][method] = {
                "pivot": r.pivot,
                "k": r.k,
                "n": r.n,
                "rounds": r.rounds,
                "bytes": r.bytes_communicated,
                "candidates": r.candidates,
                "same_on_all_ranks": len(set(pivots.tolist())) == 1,
                "count_ok": _count_check(shards, r.pivot, r.k, device),
            }
        for method in METHODS:
            fn = lambda m=method: find_pivot_stats(shards, cfg["density"], m, group, check_finite=False)
            res["methods"][method]["ms"] = _time_ms(fn, device, cfg["warmup"], cfg["reps"])
        if nccl:
            res["max_memory_allocated"] = torch.cuda.max_memory_allocated(device)
        if rank == 0:
            Path(tmp, "result.json").write_text(json.dumps(res))
        _sync(device)
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- suite interface


def _launch(world: int, cfg: dict) -> dict:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    with tempfile.TemporaryDirectory(prefix="pivot_comm_") as tmp:
        mp.start_processes(_worker, args=(world, cfg, tmp), nprocs=world, join=True, start_method="spawn")
        return json.loads(Path(tmp, "result.json").read_text())


def run(ctx: RunContext) -> None:
    cuda = ctx.device.type == "cuda"
    full = ctx.profile == "full"
    if cuda:
        torch.cuda.empty_cache()  # the ceilings' buffers: rank 0 shares this GPU
        worlds = [w for w in WORLDS if w <= torch.cuda.device_count()]
        mem = min(torch.cuda.get_device_properties(i).total_memory for i in range(max(worlds)))
    else:
        worlds = list(WORLDS)
        mem = 0
    shapes = dict(FULL, blocks=full_blocks(mem)) if full else dict(SMOKE)
    n_total = shapes["blocks"] * block_values(shapes["hidden"], shapes["ffn"])
    cfg = {
        **shapes,
        "backend": "nccl" if cuda else "gloo",
        "density": DENSITY,
        "warmup": 2 if full else 1,
        "reps": 10 if full else 5,
    }
    timer = "cuda-event" if cuda else "cpu-perf_counter"
    ctx.log(
        f"{shapes['blocks']} block(s) of hidden {shapes['hidden']}, FFN {shapes['ffn']}: {n_total:,} bf16 values "
        f"({num(2 * n_total / 2**30)} GiB) over world sizes {worlds} ({cfg['backend']}), density {DENSITY}"
    )
    measured = {}
    for world in worlds:
        res = _launch(world, cfg)
        ms = res["methods"]
        ref = ms[BASELINE]
        ctx.check(res["n_per_rank"] * world == n_total == ref["n"], f"world {world}: {ref['n']} values, not {n_total}")
        for method, m in ms.items():
            what = f"world {world} {method}"
            ctx.check(m["same_on_all_ranks"], f"{what}: ranks got different pivots")
            ctx.check(m["count_ok"], f"{what}: pivot {m['pivot']} does not keep the {m['k']} largest |w|")
            ctx.check(m["pivot"] == ref["pivot"], f"{what}: pivot {m['pivot']} != all-gather pivot {ref['pivot']}")
        if not cuda:  # the single-process pivot over all shards, regenerated here
            allw = [t for r in range(world) for t in make_shards(cfg, r, world, torch.device("cpu"))]
            single = find_pivot(allw, DENSITY)
            ctx.check(single == ref["pivot"], f"world {world}: pivot {ref['pivot']} != single-process {single}")
        measured[world] = res
    for world, res in measured.items():
        shape = f"{world}x{res['n_per_rank']}"
        ms = res["methods"]
        add = partial(ctx.results.add, variant=f"world={world}")
        for method, m in ms.items():
            ref = ms[BASELINE]["pivot"]
            err = 0.0 if m["pivot"] == ref else abs(m["pivot"] - ref) / abs(ref)  # 0: checked above
            add(method, shape, "bf16", "pivot_rel_err", err, "fraction", verified=True)
            add(method, shape, "bf16", "time", m["ms"], "ms", verified=True, timer=timer)
            add(method, shape, "bf16", "bytes_communicated", m["bytes"], "bytes", verified=True)
            add(method, shape, "bf16", "rounds", m["rounds"], "count", verified=True)
            add(method, shape, "bf16", "candidates", m["candidates"], "count", verified=True)
            ratio = ms[BASELINE]["bytes"] / m["bytes"]
            add(method, shape, "bf16", "bytes_ratio_vs_allgather", ratio, "x", verified=True)
        if "max_memory_allocated" in res:
            frac = res["max_memory_allocated"] / mem
            add("all", shape, "bf16", "peak_memory_rank0", 100 * frac, "%", verified=True)
        g, e = ms["gaussian"], ms[BASELINE]
        ctx.log(
            f"world {world}: exact {e['bytes'] / 1e6:.3g} MB {e['ms']:.3g} ms | radix {ms['radix']['bytes']} B "
            f"{ms['radix']['ms']:.3g} ms | gaussian {g['bytes']} B in {g['rounds']} rounds "
            f"({e['bytes'] / g['bytes']:.3g}x fewer) {g['ms']:.3g} ms"
        )


def _table(df: pd.DataFrame) -> pd.DataFrame:
    part = df[df["method"].isin(list(METHODS))]
    if part.empty:
        return pd.DataFrame()
    wide = part.pivot_table(index=["shape", "method"], columns="metric", values="value", aggfunc="first")
    rows = []
    for (shape, method), r in wide.iterrows():
        world, per_rank = (int(v) for v in shape.split("x"))
        rows.append(
            {
                "world": world,
                "values_per_rank": per_rank,
                "method": method,
                "time_ms": r.get("time", float("nan")),
                "bytes": r.get("bytes_communicated", float("nan")),
                "rounds": r.get("rounds", float("nan")),
                "candidates": r.get("candidates", float("nan")),
                "ratio_vs_allgather": r.get("bytes_ratio_vs_allgather", float("nan")),
                "pivot_rel_err": r.get("pivot_rel_err", float("nan")),
                "paper": PAPER_NOTE,
            }
        )
    order = {m: i for i, m in enumerate(METHODS)}
    out = pd.DataFrame(rows)
    return out.sort_values(["world", "method"], key=lambda c: c.map(order) if c.name == "method" else c)


def compare(df: pd.DataFrame) -> pd.DataFrame:
    """Per world size and method: time, bytes, rounds, candidates, bytes ratio vs the all-gather.
    The paper gives no numbers for this (Fig. 2b shows the scheme only)."""
    print(f"paper: {PAPER_NOTE}")
    return _table(df).reset_index(drop=True)


def plot(df: pd.DataFrame, stem: Path) -> list[Path]:
    from repro.plots import grouped_bars, new_figure, save  # not in the spawned ranks (matplotlib)

    table = _table(df)
    worlds = sorted(table["world"].unique())
    labels = [f"world {w}" for w in worlds]

    def series(col: str) -> dict[str, list[float]]:
        out = {}
        for method in METHODS:
            sel = table[table["method"] == method].set_index("world")[col]
            out[method] = [float(sel.get(w, float("nan"))) for w in worlds]
        return out

    fig, (ax1, ax2) = new_figure(ncols=2, width=4.8)
    grouped_bars(ax1, labels, series("bytes"), log=True, ylabel="bytes per rank per call (log)", title="Communication")
    grouped_bars(ax2, labels, series("time_ms"), log=True, ylabel="ms per call, slowest rank (log)", title="Time")
    dev, prof = df["device"].iloc[0], df["profile"].iloc[0]
    fig.suptitle(f"{TITLE}  [{dev}, {prof}; paper: {PAPER_NOTE}]", fontsize=9)
    return save(fig, stem)


def verdict(df: pd.DataFrame) -> Verdict:
    """FAST states no numbers for its pivot search: nothing to compare with."""
    return Verdict("not comparable", "the paper states no numbers for the pivot search (qualitative claim)")
