"""GPU probe (not a suite): FAST's TBS(8) mask kernel without its spills (issue 20: TBS(8)'s
speed), the same masks bit for bit.

Compiled for sm_90, the kernel with two sweeps took 255 registers and spilled (136 stores): the
row pairs' differences do not change between sweeps, so the compiler computed them once, ahead of
the sweeps, and held 28 x 8 of them. Variants, each keeping every float32 operation and its order:
- ``before``: the kernel as committed before (both starts swept together, interleaved);
- ``pinned``: the same, the tile passed through ``_pinned`` before each sweep (OR with a zero the
  compiler cannot see), so the differences are recomputed each sweep: 227 registers, no spills;
- ``sequential``: pinned, one start swept to the end before the other is built: 154 registers;
- ``split``: the two starts on two lanes a tile (``_tbs8_split_tiles``), pinned: 152 registers,
  twice the threads.
``before`` and ``pinned`` are this module's source with ``_tbs_tiles``' sweeps rewritten, imported
from a temporary file. Every variant's masks must equal ``before``'s
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


SEQUENTIAL = """    kd, total_d = _permutation_start(t, n, hh, X, False)
    for it in range(SWEEPS):
        t = _pinned(t, (n_tile_cols + it) >> 31)  # n_tile_cols + it < 2^31: a zero
        for r in tl.static_range(1, X):
            kd, total_d = _swap_round(t, kd, total_d, hh, r, X)
    ka, total_a = _permutation_start(t, n, hh, X, True)
    for it in range(SWEEPS):
        t = _pinned(t, (n_tile_cols + SWEEPS + it) >> 31)
        for r in tl.static_range(1, X):
            ka, total_a = _swap_round(t, ka, total_a, hh, r, X)
"""
INTERLEAVED = """    kd, total_d = _permutation_start(t, n, hh, X, False)
    ka, total_a = _permutation_start(t, n, hh, X, True)
    for it in range(SWEEPS):
        t = _pinned(t, (n_tile_cols + it) >> 31)
        for r in tl.static_range(1, X):
            kd, total_d = _swap_round(t, kd, total_d, hh, r, X)
            ka, total_a = _swap_round(t, ka, total_a, hh, r, X)
"""


def _module(name: str, pinned: bool) -> object:
    """``_flex_triton`` with ``_tbs_tiles``' starts interleaved (as committed before this change),
    pinned or not (``before``), imported from a temporary file."""
    src = Path(ft.__file__).read_text()
    assert SEQUENTIAL in src, "_tbs_tiles changed: update the probe"
    body = INTERLEAVED if pinned else INTERLEAVED.replace("        t = _pinned(t, (n_tile_cols + it) >> 31)\n", "")
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(src.replace(SEQUENTIAL, body))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _variant(mod: object, split: bool):
    def run(w: torch.Tensor, piv: float, tie: float) -> torch.Tensor:
        mod.TBS8_SPLIT_STARTS = split
        return mod.fast_mask_triton(w, PATTERN, piv, 1, tie)

    return run


def main(smoke: bool) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    before, interleaved = _module("_ft_before", False), _module("_ft_interleaved", True)
    variants = {
        "before": _variant(before, False),
        "pinned": _variant(interleaved, False),
        "sequential": _variant(ft, False),
        "split": _variant(ft, True),
    }
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
            share = 100 * bw / copy
            print(f"  {name:10s} {ms:7.3f} ms ({rounds}) {share:5.1f}% of copy, {base / ms:4.2f}x", flush=True)
        del w, masks
        torch.cuda.empty_cache()
    if not smoke:
        from repro.models.llama import CONFIGS, block_linear_shapes

        shapes460 = block_linear_shapes(CONFIGS["map-neo-460m"])
        for dt in (torch.bfloat16, torch.float32):
            ws = [(0.02 * torch.randn(o, i, device=dev, generator=g)).to(dt) for _n, o, i in shapes460]
            out = {}
            for split in (False, True):
                ft.TBS8_SPLIT_STARTS = split
                masker = FlexMasker(ws, PATTERN, 0.5, seed=1)
                out[split] = [m.clone() for m in masker()]
                out[(split, "t")] = [time_gpu(partial(masker, check=False)).ms for _ in range(3)]
            ft.TBS8_SPLIT_STARTS = True
            same = all(torch.equal(a, b) for a, b in zip(out[False], out[True], strict=True))
            ok_all &= same
            print(f"MAP-NEO 460M block {str(dt)[6:]}, FlexMasker TBS(8) (pivot included): masks equal {same}")
            for split in (False, True):
                ts = out[(split, "t")]
                print(f"  split={split!s:5s} {sorted(ts)[1]:7.3f} ms ({' '.join(f'{t:.3f}' for t in ts)})", flush=True)
    print("ALL MASKS EQUAL" if ok_all else "MASKS DIFFER", flush=True)


if __name__ == "__main__":
    main("--smoke" in sys.argv)
