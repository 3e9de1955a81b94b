"""Probe (not a suite): what the launch-level levers left for issue 20's 460M point would give,
measured instead of estimated (session 46 costed them on paper: about 54 us a block on an H100,
40% of copy, against the 45 us that 50% allows).

FlexMasker's 16-bit window pivot on a MAP-NEO 460M block is six launches before the mask launch:
the sample's two passes (they place the window), the counting pass, the window's select, and the
two exact passes, which run idle unless the window missed. Variants on one block, each a chain of
the same compiled kernels over one masker's buffers (programmatic dependent launch, as figure3):

  A     FlexMasker as figure3 times it (7 launches)
  W     warm start: the window the previous call placed, no sample (5 launches)
  WF    W without the idle exact passes (a hit assumed: the stand-in for conditional graph nodes) (3)
  WFs   WF with the window's select in the counting pass's last program (2)
and for TBS(4,4), with the mask kernel's within-tile searches cut out (wrong masks, timing only):
  AN, WFN, WFsN

Every variant with a real mask kernel is run once and checked first: pivot, tie share and masks
equal to A's. Timed as figure3 times FAST (CUDA-graph replay, L2 flushed by a read, median), with
% of copy as figure3 counts it (two reads of the weights and the mask bytes) and a plain copy of as
many bytes (C). A warm start is only fair in training, where the previous regeneration's window is
at hand: figure3 times one cold generation, so W* are bounds for the levers, not figure3 numbers.

    python3 scripts/probes/gpu_probe_warm_pivot.py [--smoke]

``--smoke``: TRITON_INTERPRET=1 on the CPU, a small block, the checks only (no timing).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops import _pivot_triton as pt  # noqa: E402
from kernels.ops import common  # noqa: E402
from kernels.ops.flex import TBS, FlexMasker, Vegeta  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_probe_masker_launches import weights  # noqa: E402
from gpu_probe_split_masks import no_search_module, raw, run  # noqa: E402

DENSITY = 0.5
# the window pivot's launches for one group of tensors, in order (kernels.ops._pivot_triton)
PIVOT_KERNELS = ("sample 1", "sample 2", "count", "select", "exact 1", "exact 2")


def kernel_name(launch: tuple) -> str:
    k = launch[0]
    return getattr(getattr(k, "fn", k), "__name__", str(k))


def chain(raw_launches: list[tuple], pdl: bool) -> list:
    if pdl:
        return common.chain(raw_launches)
    return [common.Launch(*x) for x in raw_launches]


def variants(ws, pattern, pdl: bool, cut) -> tuple[dict, FlexMasker]:
    """name -> launch chain over one unchained masker's buffers (p), and p."""
    p = FlexMasker(ws, pattern, DENSITY, pdl=False)
    piv = raw(p._pivot_launches)
    if len(piv) != len(PIVOT_KERNELS):
        raise SystemExit(f"expected the window pivot's {len(PIVOT_KERNELS)} launches, got {len(piv)}")
    masks = raw(p._mask_launches)
    flats16 = [w.view(-1).view(torch.int16) for w in p.weights if w.numel()]
    fused = pt.window_pivot_launches(flats16, p.counts, p.state, p.k, p.dtype, fuse_window_select=True)
    count_select = [x for x in fused if kernel_name(x) == kernel_name(piv[2])]
    if len(count_select) != 1:
        raise SystemExit("could not find the counting pass with its select")
    out = {
        "A     FlexMasker (cold, 7 launches)": piv + masks,
        "W     warm: no sample (5)": piv[2:] + masks,
        "WF    warm, no idle exact passes (3)": piv[2:4] + masks,
        "WFs   WF, select in the count (2)": count_select + masks,
    }
    if cut is not None:
        n_masks = [(getattr(cut, kernel_name(x)), *x[1:]) for x in masks]
        out["AN    A, masks with no search"] = piv + n_masks
        out["WFN   WF, masks with no search"] = piv[2:4] + n_masks
        out["WFsN  WFs, masks with no search"] = count_select + n_masks
    return {k: chain(v, pdl) for k, v in out.items()}, p


def check(name: str, p: FlexMasker, launches, ref_state, ref_masks) -> None:
    """Run the chain once over poisoned masks and state; pivot, share and masks must be A's."""
    for m in p.masks:
        m.fill_(2)
    p.state.fill_(float("nan"))
    run(launches)
    if p.state.device.type == "cuda":
        torch.cuda.synchronize()
    if not torch.equal(p.state, ref_state):
        raise SystemExit(f"{name}: pivot state {p.state.tolist()} != {ref_state.tolist()}")
    if "no search" in name:
        return
    for i, (got, want) in enumerate(zip(p.masks, ref_masks, strict=True)):
        if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
            raise SystemExit(f"{name}: masks of weight {i} differ from FlexMasker's")


def probe(model: str, pattern, device: str, pdl: bool, cut, copy_gbps: float | None) -> None:
    from repro.models.llama import CONFIGS, block_linear_shapes
    from suites.figure3 import task_bytes

    shapes = [(o, i) for _, o, i in block_linear_shapes(CONFIGS[model])] if model else [(128, 256)] * 3
    ws = weights(shapes, device=device)
    ref = FlexMasker(ws, pattern, DENSITY)
    ref(check=True)
    ref_state, ref_masks = ref.state.clone(), [m.clone() for m in ref.masks]
    chains, p = variants(ws, pattern, pdl, cut)
    run(chains["A     FlexMasker (cold, 7 launches)"])  # places the window that W* start from
    for name, launches in chains.items():
        check(name, p, launches, ref_state, ref_masks)
    n = sum(w.numel() for w in ws)
    print(f"\n{model or 'smoke block'}, {pattern}, density {DENSITY}: {n / 1e6:.1f}M values; all checked", flush=True)
    if copy_gbps is None:
        return
    from repro.timing import time_gpu

    floor_us = task_bytes(ws, pattern) / copy_gbps / 1e3
    half = task_bytes(ws, pattern) // 4  # int16: a copy of half the bytes reads and writes the rest
    src = torch.empty(half, dtype=torch.int16, device=device)
    dst = torch.empty_like(src)
    timed = {"C     copy of the same bytes": lambda: dst.copy_(src)}
    timed.update({k: (lambda v=v: run(v)) for k, v in chains.items()})
    timed["A'    FlexMasker itself (figure3's call)"] = lambda: ref(check=False)
    print(f"  figure3's floor {floor_us:.1f} us (50% of copy: {2 * floor_us:.1f} us)", flush=True)
    for name, fn in timed.items():
        t = time_gpu(fn).ms * 1e3
        print(f"  {name:40s} {t:8.1f} us  {100 * floor_us / t:5.1f}% of copy", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="CPU, TRITON_INTERPRET=1, small block, checks only")
    args = ap.parse_args()
    if args.smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("--smoke needs TRITON_INTERPRET=1")
        pt.WINDOW_MIN_VALUES = 0  # the window pivot at any size
        with tempfile.TemporaryDirectory() as tmp:
            probe("", TBS(4), "cpu", False, no_search_module(tmp), None)
        return
    from repro.roofline import measure_ceilings

    dev = torch.device("cuda")
    copy = measure_ceilings(dev).copy_gbps
    print(f"{torch.cuda.get_device_name()}; copy {copy:.0f} GB/s; torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        cut = no_search_module(tmp)
        for pattern in (TBS(4), Vegeta(4), Vegeta(8)):
            probe("map-neo-460m", pattern, "cuda", True, cut if pattern == TBS(4) else None, copy)


if __name__ == "__main__":
    main()
