"""GPU probe (not a suite): FAST's TBS(8) mask kernel without its spills (issue 20: TBS(8)'s
speed), the same masks bit for bit.

Compiled for sm_90, the kernel with two sweeps took 255 registers and spilled (136 stores): the
row pairs' differences do not change between sweeps, so the compiler computed them once, ahead of
the sweeps, and held 28 x 8 of them. Two changes, each keeping every float32 operation and its
order:
- ``pinned``: before each sweep the tile passes through ``_pinned`` (OR with a zero the compiler
  cannot see), so the differences are recomputed each sweep: 227 registers, no spills.
- ``split``: the two starts on two lanes a tile (``_tbs8_split_tiles``), one start a thread, also
  pinned: 152 registers, no spills, twice the threads.
``before`` is today's kernel as committed before them (this module's source with the ``_pinned``
lines taken out, imported from a temporary file). Every variant's masks must equal ``before``'s
(and be valid TBS(8)) before timing. Timed with ``repro.timing.time_gpu`` (CUDA-graph replays, L2
flushed, median) in three alternating rounds, with % of the measured copy bandwidth (weight read +
bool mask written); then a MAP-NEO 460M block through ``FlexMasker`` (pivot included) with
``TBS8_SPLIT_STARTS`` off and on.

    python3 scripts/probes/gpu_probe_tbs8_split.py                          # one GPU
    TRITON_INTERPRET=1 python3 scripts/probes/gpu_probe_tbs8_split.py --smoke   # CPU: masks equal
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import kernels.ops._flex_triton as ft  # noqa: E402
from kernels.ops.flex import FlexMasker, tie_share  # noqa: E402
from kernels.ops.patterns import TBS  # noqa: E402
from kernels.ops.pivot import find_pivot  # noqa: E402

SHAPES = ((13824, 5120, torch.bfloat16), (24576, 3072, torch.bfloat16), (13824, 5120, torch.float32))
PATTERN = TBS(8)


def _before_module() -> object:
    """``_flex_triton`` without the ``_pinned`` calls: the committed kernel before this change."""
    src = Path(ft.__file__).read_text()
    lines = [ln for ln in src.splitlines() if "t = _pinned(t," not in ln]
    assert len(lines) == len(src.splitlines()) - 2, "expected two _pinned calls"
    path = Path(tempfile.mkdtemp()) / "_flex_triton_before.py"
    path.write_text("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location("_flex_triton_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.TBS8_SPLIT_STARTS = False
    return mod


def _variant(mod: object, split: bool):
    def run(w: torch.Tensor, piv: float, tie: float) -> torch.Tensor:
        mod.TBS8_SPLIT_STARTS = split
        return mod.fast_mask_triton(w, PATTERN, piv, 1, tie)

    return run


def main(smoke: bool) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    before = _before_module()
    variants = {"before": _variant(before, False), "pinned": _variant(ft, False), "split": _variant(ft, True)}
    shapes = ((16, 48, torch.bfloat16), (24, 40, torch.float32)) if smoke else SHAPES
    g = torch.Generator(device=dev).manual_seed(0)
    copy = None
    if not smoke:
        from repro.roofline import gbps, measure_ceilings
        from repro.timing import time_gpu

        copy = measure_ceilings(dev).copy_gbps
        print(f"{torch.cuda.get_device_name(dev)}; torch {torch.__version__}; copy {copy:.0f} GB/s", flush=True)
    ok_all = True
    for r, c, dt in shapes:
        w = (0.02 * torch.randn(r, c, device=dev, generator=g)).to(dt)
        piv = find_pivot(w, 0.5, method="exact")
        tie = tie_share(w, piv, 0.5)
        masks = {name: fn(w, piv, tie) for name, fn in variants.items()}
        PATTERN.validate(masks["before"])
        same = {name: torch.equal(m, masks["before"]) for name, m in masks.items()}
        ok_all &= all(same.values())
        print(f"{r}x{c} {str(dt)[6:]}: masks equal to before: {same}", flush=True)
        if smoke or not all(same.values()):
            continue
        nbytes = w.numel() * (w.element_size() + 1)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _round in range(3):
            for name, fn in variants.items():
                times[name].append(time_gpu(partial(fn, w, piv, tie)).ms)
        base = sorted(times["before"])[1]
        for name, ts in times.items():
            ms = sorted(ts)[1]
            bw = gbps(nbytes, ms)
            rounds = " ".join(f"{t:.3f}" for t in ts)
            print(f"  {name:7s} {ms:7.3f} ms ({rounds}) {100 * bw / copy:5.1f}% of copy, {base / ms:4.2f}x", flush=True)
        del w, masks
        torch.cuda.empty_cache()
    if not smoke:
        from repro.models.llama import CONFIGS, block_linear_shapes

        ws = [
            (0.02 * torch.randn(o, i, device=dev, generator=g)).bfloat16()
            for _n, o, i in block_linear_shapes(CONFIGS["map-neo-460m"])
        ]
        out = {}
        for split in (False, True):
            ft.TBS8_SPLIT_STARTS = split
            masker = FlexMasker(ws, PATTERN, 0.5, seed=1)
            out[split] = [m.clone() for m in masker()]
            out[(split, "t")] = [time_gpu(partial(masker, check=False)).ms for _ in range(3)]
        ft.TBS8_SPLIT_STARTS = True
        same = all(torch.equal(a, b) for a, b in zip(out[False], out[True], strict=True))
        ok_all &= same
        print(f"MAP-NEO 460M block, FlexMasker TBS(8) (pivot included): masks equal {same}", flush=True)
        for split in (False, True):
            ts = out[(split, "t")]
            print(f"  split={split!s:5s} {sorted(ts)[1]:7.3f} ms ({' '.join(f'{t:.3f}' for t in ts)})", flush=True)
    print("ALL MASKS EQUAL" if ok_all else "MASKS DIFFER", flush=True)


if __name__ == "__main__":
    main("--smoke" in sys.argv)
