"""Probe (not a suite): the window pivot's counting pass over int32 words (two values each, SWAR;
``_window_pairs_kernel``) against the one-value pass (``_window_kernel``), and what it does to
FlexMasker's whole generation.

Every variant is checked first (pivot state bit for bit, #(above), #(equal), non-finite count
equal to the exact two-pass select; FlexMasker's masks equal to the one-value pivot's), then
timed as figure3 times FAST (CUDA-graph replay, L2 flushed, median), with % of copy as figure3
counts it. Parts: the counting pass alone (after the sample placed the window), in a grid and
warp sweep; the pivot alone, chained (PDL) or not; FlexMasker whole for TBS(4), Vegeta(4), 2:4,
TBS(8). MAP-NEO 460M and 7B blocks, row-scaled bf16, density 0.5 (and 0.25 for the pivot).
Where ``old_flex_tbs4_6672a0d.py`` sits beside this file (``git show
6672a0d:kernels/ops/_flex_tbs4_triton.py``: two permutation searches, for n = 1 and n = 3), also the
TBS(4) mask launch alone, old kernel against this checkout's (one search on -|w| for n = 3).
Record: results/tuning/h100_probe_pair_count.txt (at 7303fb7; the first run, at 4e49dfa, is in git).

    python3 scripts/probes/gpu_probe_pair_count.py
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops import _pivot_triton as pt  # noqa: E402
from kernels.ops import common  # noqa: E402
from kernels.ops.flex import NM, TBS, FlexMasker, Vegeta  # noqa: E402
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402
from repro.roofline import measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402
from suites.figure3 import task_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_probe_masker_launches import weights  # noqa: E402  (the same row-scaled bf16 block)

SEED = 0


def run(launches) -> None:
    for x in launches:
        x(None)


def exact(flats, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    counts = torch.zeros(pt.COUNTS_LEN, dtype=torch.int64, device="cuda")
    counts[: pt.HIST_LEN] = pt.hist16_counts(flats, k)
    state = torch.full((2,), float("nan"), device="cuda")
    pt.select16(counts, state, k, torch.bfloat16, clear=True)
    return state, counts[pt.NONFINITE :]


def pivot_part(ws, density: float, copy: float, sms: int) -> None:
    flats = [w.view(-1).view(torch.int16) for w in ws]
    n = sum(f.numel() for f in flats)
    k = round(density * n)
    want_state, want_counts = exact(flats, k)
    one_read = 2 * n / copy / 1e3  # us at the copy bandwidth
    print(f"  density {density}: one read at copy {one_read:.1f} us")
    configs = {
        "values": dict(pairs_count=False),
        "pairs": dict(),
        "pairs, window select folded": dict(fuse_window_select=True),
        "pairs, sample on 1/SM": dict(sample_programs=sms),
        "pairs, sample on 2/SM": dict(sample_programs=2 * sms),
        "pairs, sample on 4/SM": dict(sample_programs=4 * sms),
        "pairs, folded, sample on 2/SM": dict(fuse_window_select=True, sample_programs=2 * sms),
    }
    for pdl in (False, True):
        for name, kw in configs.items():
            counts = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64, device="cuda")
            state = torch.full((2,), float("nan"), device="cuda")
            raw = pt.window_pivot_launches(flats, counts, state, k, torch.bfloat16, **kw)
            launches = common.chain(raw) if pdl else [common.Launch(*x) for x in raw]
            run(launches)
            torch.cuda.synchronize()
            ok = torch.equal(state.view(torch.int32), want_state.view(torch.int32))
            ok = ok and torch.equal(counts[pt.NONFINITE : pt.COUNTS_LEN], want_counts)
            hit = "hit" if int(counts[pt.FLAG_AT]) == 0 else "MISSED"
            label = f"pivot, {name}{', PDL' if pdl else ''}"
            if not ok:
                print(f"    {label:48s} DIFFERS from the exact select: not timed")
                continue
            t = time_gpu(functools.partial(run, launches)).ms * 1e3
            print(f"    {label:48s} {t:8.1f} us  {hit}  {len(launches)} launches")
    # the counting pass alone: the sample's passes place the window once, then only the count runs
    counts = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64, device="cuda")
    state = torch.full((2,), float("nan"), device="cuda")
    for pairs, programs, warps in [(False, 2 * sms, 4)] + [(True, p * sms, w) for p in (1, 2, 4) for w in (4, 8)]:
        raw = pt.window_pivot_launches(
            flats, counts, state, k, torch.bfloat16, pairs_count=pairs, count_programs=programs, count_warps=warps
        )
        launches = [common.Launch(*x) for x in raw]
        run(launches[:2])  # the sample: writes the window's lowest key
        count = [x for x in launches if x.kernel in (pt._window_kernel, pt._window_pairs_kernel)]
        t = time_gpu(functools.partial(run, count)).ms * 1e3
        name = f"count pass, {'pairs' if pairs else 'values'}, {count[0].grid[0]} programs, {warps} warps"
        print(f"    {name:52s} {t:8.1f} us  {100 * one_read / t:5.1f}% of copy")
        counts.zero_()


def masker_part(ws, copy: float) -> None:
    plain = functools.partial(pt.window_pivot_launches, pairs_count=False)
    for pattern in (TBS(4), Vegeta(4), NM(2, 4), TBS(8)):
        nbytes = task_bytes(ws, pattern)
        new = FlexMasker(ws, pattern, 0.5, SEED)
        real = pt.window_pivot_launches
        pt.window_pivot_launches = plain
        try:
            old = FlexMasker(ws, pattern, 0.5, SEED)
        finally:
            pt.window_pivot_launches = real
        outs = []
        for m in (old, new):
            for mask in m.masks:
                mask.fill_(True)
            outs.append([x.clone() for x in m(check=False)])
        torch.cuda.synchronize()
        ok = all(torch.equal(a, b) for a, b in zip(*outs, strict=True))
        line = f"  {pattern.name:10s}"
        if not ok:
            print(f"{line} masks DIFFER: not timed")
            continue
        for label, m in (("values", old), ("pairs", new)):
            t = time_gpu(lambda m=m: m(check=False)).ms * 1e3
            line += f"  {label} {t:8.1f} us {100 * nbytes / (t * 1e-6) / 1e9 / copy:5.1f}% of copy"
        print(line)


def tbs4_masks_part(ws, copy: float, old_path: str) -> None:
    """The TBS(4) mask launch alone: this checkout's kernel against an older generated file
    (``old_path``), same arguments, masks checked equal first."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("old_flex_tbs4", old_path)
    old_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old_mod)
    masker = FlexMasker(ws, TBS(4), 0.5, SEED, pdl=False)
    masker(check=False)  # the pivot, once
    new = [x for x in masker._mask_launches]
    swap = {"flex_tbs4_kernel": old_mod.flex_tbs4_kernel, "flex_tbs4_multi_kernel": old_mod.flex_tbs4_multi_kernel}
    old = [common.Launch(swap[x.kernel.__name__], x.grid, x.args, x.warps) for x in new]
    outs = []
    for launches in (old, new):
        masker._mask_buffer.fill_(True)
        run(launches)
        torch.cuda.synchronize()
        outs.append(masker._mask_buffer.clone())
    if not torch.equal(*outs):
        print("  TBS(4) masks alone: DIFFER from the old kernel's: not timed")
        return
    one = 2 * masker.n / copy / 1e3 + masker.n / copy / 1e3  # read bf16 once, write bool masks
    for label, launches in (("old (6672a0d)", old), ("new", new)):
        t = time_gpu(functools.partial(run, launches)).ms * 1e3
        print(f"  TBS(4) masks alone, {label:14s} {t:8.1f} us  {100 * one / t:5.1f}% of its one-read roofline")


def main() -> None:
    copy = measure_ceilings(torch.device("cuda")).copy_gbps
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    import triton

    print(
        f"{torch.cuda.get_device_name()}; copy {copy:.0f} GB/s; torch {torch.__version__}; triton {triton.__version__}"
    )
    for model in ("map-neo-460m", "map-neo-7b"):
        shapes = [(o, i) for _, o, i in block_linear_shapes(CONFIGS[model])]
        ws = weights(shapes)
        n = sum(w.numel() for w in ws)
        print(f"\n{model}: {len(ws)} weights, {n / 1e6:.1f}M values, row-scaled bf16")
        for density in (0.5, 0.25) if n < 1 << 25 else (0.5,):
            pivot_part(ws, density, copy, sms)
        print("  FlexMasker whole (its defaults), the pivot's counting pass by values or by pairs:")
        masker_part(ws, copy)
        old = Path(__file__).with_name("old_flex_tbs4_6672a0d.py")
        if old.exists():
            tbs4_masks_part(ws, copy, str(old))


if __name__ == "__main__":
    main()
