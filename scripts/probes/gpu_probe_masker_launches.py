"""Probe (not a suite): where FlexMasker's launches go, and what fewer and chained launches save.

A MAP-NEO 460M block's masks take about a dozen kernels of a few microseconds each, so the gaps
between kernels are a large part of its time. Variants, each checked first (masks, pivot state
and counts equal to variant A's), then timed as figure3 times FAST (CUDA-graph replay of
``masker(check=False)``, L2 flushed, median), with % of copy as figure3 counts it:

  A  before: one mask launch per weight; the window pivot's two selects as launches of their
     own; the idle fallback on 1024 programs (the design at eb275ff)
  B  one mask launch for the block (``multi_mask_launches``)
  C  B + the fallback's select in its second pass's last program + the fallback on 2 programs
     per SM (FlexMasker's defaults, ``pdl=False``)
  D  C + programmatic dependent launch (``pdl=True``: each kernel launches while the one before
     it runs)

and the parts of D: the pivot's launches alone, the masks' alone; then the pivot alone in
variants (which selects fold into a pass, the fallback's grid, PDL). Patterns TBS(4), TBS(8),
Vegeta(4), Vegeta(8), 2:4 at density 0.5, MAP-NEO 460M and 7B blocks. (Records: at c893e8f
h100_probe_masker_launches.txt; at fa8e0f0, with an int32-packed counting pass since removed,
h100_probe_masker_launches_pack32.txt.)

    python3 scripts/probes/gpu_probe_masker_launches.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops import _pivot_triton as pt  # noqa: E402
from kernels.ops import common  # noqa: E402
from kernels.ops._flex_triton import mask_launch  # noqa: E402
from kernels.ops.flex import NM, TBS, FlexMasker, Vegeta  # noqa: E402
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402
from repro.roofline import measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402
from suites.figure3 import task_bytes  # noqa: E402

DENSITY, SEED = 0.5, 0


def weights(shapes, seed: int = 0, device: str = "cuda") -> list[torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    out = []
    for o, i in shapes:
        w = 0.02 * torch.randn(o, i, device=device, generator=gen)
        w = w * torch.rand(o, 1, device=device, generator=gen).add(0.25)
        out.append(w.to(torch.bfloat16))
    return out


def old_pivot(masker: FlexMasker) -> FlexMasker:
    """Variant B: the pivot's launches as at eb275ff (selects launched apart, the fallback on 1024
    programs); the masks as FlexMasker builds them (one launch below MULTI_MAX_VALUES)."""
    if masker._needs_pivot:
        flats = [w.view(-1).view(torch.int16) for w in masker.weights]
        launches = pt.window_pivot_launches(
            flats, masker.counts, masker.state, masker.k, masker.dtype, fallback_programs=1024, fuse_select=False
        )
        masker._pivot_launches = [common.Launch(*x) for x in launches]
    return masker


def before(masker: FlexMasker) -> FlexMasker:
    """Variant A: the launches as they were at eb275ff (no PDL, selects and masks launched apart)."""
    old_pivot(masker)
    masker._mask_launches = [
        common.Launch(*mask_launch(w, m, masker.pattern, masker.state, masker.seed))
        for w, m in zip(masker.weights, masker.masks, strict=True)
    ]
    return masker


def outputs(masker: FlexMasker) -> tuple:
    for m in masker.masks:
        m.fill_(True)
    if masker._needs_pivot:
        masker.state.fill_(float("nan"))
    masks = [m.clone() for m in masker(check=False)]
    torch.cuda.synchronize()
    return masks, masker.state.clone(), masker.counts[pt.NONFINITE : pt.COUNTS_LEN].clone()


def same(a: tuple, b: tuple) -> bool:
    masks = all(torch.equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    return masks and torch.equal(a[1].view(torch.int32), b[1].view(torch.int32)) and torch.equal(a[2], b[2])


def main() -> None:
    copy = measure_ceilings(torch.device("cuda")).copy_gbps
    from kernels.ops._chain_triton import pdl_supported

    print(f"{torch.cuda.get_device_name()}; copy {copy:.0f} GB/s; torch {torch.__version__}")
    import triton

    print(f"triton {triton.__version__}; PDL supported: {pdl_supported(torch.device('cuda'))}")
    for model in ("map-neo-460m", "map-neo-7b"):
        shapes = [(o, i) for _, o, i in block_linear_shapes(CONFIGS[model])]
        ws = weights(shapes)
        n = sum(w.numel() for w in ws)
        print(f"\n{model}: {len(ws)} weights, {n / 1e6:.1f}M values, density {DENSITY}, row-scaled bf16")
        for pattern in (TBS(4), Vegeta(4), Vegeta(8), NM(2, 4), TBS(8)):
            nbytes = task_bytes(ws, pattern)
            variants = {
                "A before (eb275ff)": before(FlexMasker(ws, pattern, DENSITY, SEED, pdl=False)),
                "B one mask launch": old_pivot(FlexMasker(ws, pattern, DENSITY, SEED, pdl=False)),
                "C B + selects folded": FlexMasker(ws, pattern, DENSITY, SEED, pdl=False),
                "D C + PDL": FlexMasker(ws, pattern, DENSITY, SEED, pdl=True),
            }
            want = outputs(variants["A before (eb275ff)"])
            print(f"  {pattern.name}")
            for name, masker in variants.items():
                ok = same(outputs(masker), want)
                launches = len(masker._pivot_launches) + len(masker._mask_launches)
                if not ok:
                    print(f"    {name:26s} DIFFERS from A: not timed")
                    continue
                t = time_gpu(lambda masker=masker: masker(check=False))
                pct = 100 * nbytes / (t.ms * 1e-3) / 1e9 / copy
                line = f"    {name:26s} {t.ms * 1e3:8.1f} us {pct:6.1f}% of copy  {launches:2d} launches"
                print(f"{line}  direct={masker.direct}")
            d = variants["D C + PDL"]

            def pivot_only(d=d) -> None:
                stream = common.direct_stream(d.device) if d.direct else None
                for x in d._pivot_launches:
                    x(stream)

            def masks_only(d=d) -> None:
                stream = common.direct_stream(d.device) if d.direct else None
                for x in d._mask_launches:
                    x(stream)

            if d._pivot_launches:
                print(f"      D's pivot alone          {time_gpu(pivot_only).ms * 1e3:8.1f} us")
            print(f"      D's masks alone          {time_gpu(masks_only).ms * 1e3:8.1f} us")
            if isinstance(pattern, TBS) and pattern.x == 4:
                pivot_sweep(variants["C B + selects folded"], want)


def pivot_sweep(masker: FlexMasker, want: tuple) -> None:
    """The pivot alone, in variants, each checked (state and counts equal to A's) then timed."""
    flats = [w.view(-1).view(torch.int16) for w in masker.weights]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    configs = {
        "selects launched, fallback 1024 (A)": dict(fuse_select=False, fallback_programs=1024),
        "selects launched, fallback 2/SM": dict(fuse_select=False),
        "fallback select folded, fallback 2/SM (C)": dict(),
        "fallback select folded, fallback 1/SM": dict(fallback_programs=sms),
        "both selects folded, fallback 2/SM": dict(fuse_window_select=True),
    }
    print("    the pivot alone (TBS(4,4)'s masker):")
    for pdl in (False, True):
        for name, kw in configs.items():
            raw = pt.window_pivot_launches(flats, masker.counts, masker.state, masker.k, masker.dtype, **kw)
            launches = common.chain(raw) if pdl else [common.Launch(*x) for x in raw]

            def call(launches=launches) -> None:
                for x in launches:
                    x(None)

            masker.state.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            ok = torch.equal(masker.state.view(torch.int32), want[1].view(torch.int32))
            ok = ok and torch.equal(masker.counts[pt.NONFINITE : pt.COUNTS_LEN], want[2])
            label = f"{name}{', PDL' if pdl else ''}"
            if not ok:
                print(f"      {label:52s} DIFFERS from A: not timed")
                continue
            print(f"      {label:52s} {time_gpu(call).ms * 1e3:8.1f} us  {len(launches)} launches")


if __name__ == "__main__":
    main()
