"""GPU probe (not a suite): speed of the fused TBS(x >= 8) mask kernel with the row-pair swap
selection (``kernels.ops.patterns.tbs_select_swaps``) against the copy bandwidth.

For bf16 weights 13824x5120, 24576x3072 and 3072x1024 at density 0.5 (pivot from
``kernels.ops.pivot.find_pivot``, tie share from ``kernels.ops.flex.tie_share``), times
``fast_mask_triton`` for TBS(8) and TBS(16) at SWEEPS 0..3 and a few launch settings
(CIRCULANT_ELEMS, CIRCULANT_WARPS), with ``repro.timing.time_gpu`` (CUDA-graph replays between
CUDA events, L2 flushed by a read before every sample, median). Before timing, every mask must be
valid (``pattern.validate``); the default launch at the default SWEEPS must also equal the
plain-PyTorch reference (``flex_mask_reference``), and every other launch setting the default's
mask at the same SWEEPS. Prints ms, GB/s (bytes = weight read + bool mask written) and % of the
measured device-to-device copy bandwidth (``repro.roofline.measure_ceilings``).

    python scripts/probes/gpu_probe_tbs_select.py [--quick] [--shapes 13824x5120,...] [--x 8,16] [--sweeps 0,1,2,3]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import kernels.ops._flex_triton as ft  # noqa: E402
from kernels.ops.flex import flex_mask_reference, tie_share  # noqa: E402
from kernels.ops.patterns import SWEEPS, TBS  # noqa: E402
from kernels.ops.pivot import find_pivot  # noqa: E402
from repro.roofline import gbps, measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

SHAPES = ((13824, 5120), (24576, 3072), (3072, 1024))
LAUNCHES = {8: ((8192, 4), (4096, 2), (16384, 4), (16384, 8)), 16: ((8192, 4), (4096, 2), (16384, 8))}


def _launch(w, pattern, piv, tie, sweeps, elems, warps, maxnreg=None):
    """``fast_mask_triton`` with the module's launch settings replaced for this call."""
    saved = ft.SWEEPS, ft.CIRCULANT_ELEMS, ft.CIRCULANT_WARPS
    ft.SWEEPS, ft.CIRCULANT_ELEMS, ft.CIRCULANT_WARPS = sweeps, elems, warps
    try:
        out = torch.empty(w.shape, dtype=torch.bool, device=w.device)
        kernel, grid, args, nw = ft.mask_launch(w, out, pattern, piv, 1, tie)
        kernel[grid](*args, num_warps=nw, **({"maxnreg": maxnreg} if maxnreg else {}))
        return out
    finally:
        ft.SWEEPS, ft.CIRCULANT_ELEMS, ft.CIRCULANT_WARPS = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(f"{r}x{c}" for r, c in SHAPES))
    ap.add_argument("--x", default="8,16")
    ap.add_argument("--sweeps", default="0,1,2,3")
    ap.add_argument("--quick", action="store_true", help="default launch settings only")
    ap.add_argument("--maxnreg", default="", help="also try these register caps, e.g. 128,168")
    args = ap.parse_args()
    dev = torch.device("cuda")
    copy = measure_ceilings(dev).copy_gbps
    print(f"{torch.cuda.get_device_name(dev)}; torch {torch.__version__}; copy {copy:.0f} GB/s", flush=True)
    default = (ft.CIRCULANT_ELEMS, ft.CIRCULANT_WARPS)
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for shape in args.shapes.split(","):
        r, c = (int(v) for v in shape.split("x"))
        w = (0.02 * torch.randn(r, c, device=dev, generator=g)).bfloat16()
        piv = find_pivot(w, 0.5, method="exact")
        tie = tie_share(w, piv, 0.5)
        nbytes = w.numel() * (w.element_size() + 1)
        for x in (int(v) for v in args.x.split(",")):
            pattern = TBS(x)
            launches = [default] if args.quick else [default, *(s for s in LAUNCHES[x] if s != default)]
            launches = [(e, nw, None) for e, nw in launches]
            launches += [(*default, int(m)) for m in args.maxnreg.split(",") if m]
            for sweeps in (int(v) for v in args.sweeps.split(",")):
                first = None
                for elems, warps, maxnreg in launches:
                    t0 = time.perf_counter()
                    try:
                        m = _launch(w, pattern, piv, tie, sweeps, elems, warps, maxnreg)
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001 (a setting Triton cannot build)
                        print(f"{shape} TBS({x}) sweeps={sweeps} elems={elems} warps={warps} maxnreg={maxnreg}: {e!r}")
                        continue
                    build = time.perf_counter() - t0
                    pattern.validate(m)  # raises on an invalid mask: nothing invalid gets timed
                    note = ""
                    if first is None:
                        first = m
                        if sweeps == SWEEPS and (elems, warps, maxnreg) == (*default, None):
                            ref = flex_mask_reference(w, pattern, 0.5, "fast", 1, piv, tie)
                            bad = int((pattern.tiles(m) != pattern.tiles(ref)).flatten(1).any(1).sum())
                            note = "= reference" if bad == 0 else f"{bad} tiles differ from the reference"
                    elif not torch.equal(m, first):
                        note = "MASK DIFFERS from the default launch"
                    fn = partial(_launch, w, pattern, piv, tie, sweeps, elems, warps, maxnreg)
                    t = time_gpu(fn)
                    bw = gbps(nbytes, t.ms)
                    kept = float((w.abs().float() * m).sum() / (w.abs().float() * (w.abs() >= piv)).sum())
                    rows.append((shape, x, sweeps, elems, warps, maxnreg or 0, t.ms, bw, 100 * bw / copy, kept, note))
                    print(
                        f"{shape:>11s} TBS({x:2d}) sweeps={sweeps} elems={elems:5d} warps={warps} maxnreg={maxnreg}: "
                        f"{t.ms:7.3f} ms "
                        f"{bw:6.0f} GB/s {100 * bw / copy:5.1f}% of copy; kept/top-k {kept:.4f}; "
                        f"first call {build:.1f} s {note}",
                        flush=True,
                    )
        del w
        torch.cuda.empty_cache()
    print("\nshape        x  sweeps elems warps maxnreg     ms    GB/s  %copy  kept/topk")
    for shape, x, sweeps, elems, warps, mr, ms, bw, pct, kept, note in rows:
        print(
            f"{shape:>11s} {x:2d} {sweeps:6d} {elems:5d} {warps:5d} {mr:7d} {ms:7.3f} {bw:6.0f} {pct:6.1f} {kept:9.4f}",
            note,
        )


if __name__ == "__main__":
    main()
