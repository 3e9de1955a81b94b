"""Probe (not a suite): the persistent window pivot (``kernels.ops._pivot_persistent_triton``, one
launch with grid barriers) against the window pivot's six launches as FlexMasker runs them
(``_pivot_triton.window_pivot_launches``, chained with PDL), on MAP-NEO 460M and 7B blocks
(row-scaled bf16, densities 0.5 and 0.25), and on a block whose sample misses (the exact passes
run). Every variant is checked first (pivot state bit for bit, #(non-finite), #(> pivot),
#(== pivot) equal to the exact two-pass select, buffers left zeroed, no barrier timed out), then
timed as figure3 times FAST (CUDA-graph replay, L2 flushed, median), with % of the one-read copy.
Grids: one or two programs per SM with 8 to 32 warps (every program must be resident for the
barriers; session 26 swept them after 4 and 8 warps lost to the six launches).
A barrier that times out (SPIN_LIMIT polls) raises the flag and the variant is reported, not timed.

    timeout 300 python3 scripts/probes/gpu_probe_persistent_pivot.py
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops import _pivot_persistent_triton as pp  # noqa: E402
from kernels.ops import _pivot_triton as pt  # noqa: E402
from kernels.ops import common  # noqa: E402
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402
from repro.roofline import measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_probe_masker_launches import weights  # noqa: E402  (the same row-scaled bf16 block)
from gpu_probe_pair_count import exact  # noqa: E402


def run(launches) -> None:
    for x in launches:
        x(None)


def check(state, counts, want_state, want_counts, sync=None) -> str:
    """'' where the results equal the exact select and the buffers are clean, else what differs."""
    if sync is not None and int(sync[2]) != 0:
        return "a grid barrier timed out"
    if not torch.equal(state.view(torch.int32), want_state.view(torch.int32)):
        return f"pivot state {state.tolist()} != {want_state.tolist()}"
    if not torch.equal(counts[pt.NONFINITE : pt.COUNTS_LEN], want_counts):
        return "counts differ"
    if sync is not None:
        rest = counts.clone()
        rest[pt.NONFINITE : pt.COUNTS_LEN] = 0
        rest[pt.LO_AT] = 0
        if rest.any() or sync.any():
            return "buffers not left zeroed"
    return ""


def compare(ws, density: float, copy: float, sms: int, label: str) -> None:
    flats = [w.view(-1).view(torch.int16) for w in ws]
    n = sum(f.numel() for f in flats)
    k = round(density * n)
    want_state, want_counts = exact(flats, k)
    one_read = 2 * n / copy / 1e3  # us at the copy bandwidth
    print(f"  {label}, density {density}: {n / 1e6:.1f}M values, one read at copy {one_read:.1f} us", flush=True)
    counts = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64, device="cuda")
    state = torch.full((2,), float("nan"), device="cuda")
    six = common.chain(pt.window_pivot_launches(flats, counts, state, k, torch.bfloat16))
    run(six)
    torch.cuda.synchronize()
    missed = "missed" if int(counts[pt.FLAG_AT]) else "hit"
    bad = check(state, counts, want_state, want_counts)
    if bad:
        print(f"    six launches (PDL): {bad}: not timed", flush=True)
    else:
        t = time_gpu(functools.partial(run, six)).ms * 1e3
        print(
            f"    six launches (PDL)            {t:8.1f} us  {100 * one_read / t:5.1f}% of copy  window {missed}",
            flush=True,
        )
    for programs, warps in ((sms, 8), (sms, 16), (sms, 32), (2 * sms, 8), (2 * sms, 16)):
        counts = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64, device="cuda")
        sync = torch.zeros(pp.SYNC_LEN, dtype=torch.int64, device="cuda")
        state = torch.full((2,), float("nan"), device="cuda")
        raw = pp.window_pivot_persistent_launches(
            flats, counts, state, sync, k, torch.bfloat16, programs=programs, warps=warps
        )
        one = [common.Launch(*x) for x in raw]
        name = f"persistent, {programs} programs, {warps} warps"
        run(one)
        torch.cuda.synchronize()
        bad = check(state, counts, want_state, want_counts, sync)
        if bad:
            print(f"    {name}: {bad}: not timed", flush=True)
            continue
        t = time_gpu(functools.partial(run, one)).ms * 1e3
        bad = check(state, counts, want_state, want_counts, sync)  # after the timed replays too
        tail = f"  AFTER TIMING: {bad}" if bad else ""
        print(f"    {name:30s} {t:8.1f} us  {100 * one_read / t:5.1f}% of copy{tail}", flush=True)


def missing_block(ws) -> list[torch.Tensor]:
    """The block with its sampled sectors (the first 16 of every 512 values) set large: the
    window misses and the exact passes run."""
    out = []
    for w in ws:
        v = w.clone()
        v.view(-1)[: v.numel() // 512 * 512].view(-1, 512)[:, :16] = 100.0
        out.append(v)
    return out


def main() -> None:
    import triton

    copy = measure_ceilings(torch.device("cuda")).copy_gbps
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(
        f"{torch.cuda.get_device_name()}; {sms} SMs; copy {copy:.0f} GB/s; "
        f"torch {torch.__version__}; triton {triton.__version__}"
    )
    for model in ("map-neo-460m", "map-neo-7b"):
        shapes = [(o, i) for _, o, i in block_linear_shapes(CONFIGS[model])]
        ws = weights(shapes)
        print(f"\n{model}: {len(ws)} weights", flush=True)
        for density in (0.5, 0.25):
            compare(ws, density, copy, sms, model)
        if model == "map-neo-460m":
            compare(missing_block(ws), 0.5, copy, sms, f"{model}, sample made to miss")


if __name__ == "__main__":
    main()
