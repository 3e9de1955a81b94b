"""GPU probe (not a suite): FAST's TBS(8) mask kernel without its spills and with shorter
chains (issue 20: TBS(8)'s speed), the same masks bit for bit.

Compiled for sm_90 (``scripts/probes/sass_count.py --tbs8``), the kernel with two sweeps took 255
registers and spilled (136 stores): the row pairs' differences do not change between sweeps, so
the compiler computed them once, ahead of the sweeps, and held 28 x 8 of them. Variants, each
keeping every float32 operation and its order, so the same masks:
- ``before``: the kernel as committed at 70597f6;
- ``pinned``: the tile passed through ``_pinned`` before each sweep (OR with a zero the compiler
  cannot see), so the differences are recomputed each sweep: 227 registers, no spills;
- ``tree`` (today's kernel): pinned, and each pair's masked arg-max and arg-min taken by a tree of
  merges (``_tree_best``, depth 3) instead of a scan (depth 8): 237 registers, no spills, 5952
  instructions a tile against 6584.
``before`` and ``pinned`` are this module's source with the scan ``_best_swap`` (``LINEAR``) put
back, and for ``before`` the pinning taken out, imported from a temporary file. Every variant's
masks must equal ``before``'s (and be valid TBS(8)) before timing. Timed with
``repro.timing.time_gpu`` (CUDA-graph replays, L2 flushed, median) in three alternating rounds,
with % of the measured copy bandwidth (weight read + bool mask written); then a MAP-NEO 460M
block through ``FlexMasker`` (pivot included), bf16 and float32, before and today.
(Also measured once, at 6e50b82..: the two starts on two lanes a tile, 1.17x on bf16 but 0.42x on
float32 (layout conversions through shared memory); one start swept before the other, 154
registers but 1.00x: the kernel is latency-bound, the two starts' independent chains are its ILP.)

    python3 scripts/probes/gpu_probe_tbs8_registers.py                          # one GPU
    TRITON_INTERPRET=1 python3 scripts/probes/gpu_probe_tbs8_registers.py --smoke   # CPU: masks equal
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

LINEAR = '''@triton.jit
def _best_swap(d, ki, kp, hh, H: tl.constexpr):
    """For a row pair (i, p) with d[j] = t[p, j] - t[i, j] (this lane's 8 columns): the largest
    d over a = K_i & ~K_p and the smallest over b = K_p & ~K_i, each with its column (lowest on
    ties; -inf / +inf if empty). Returns (gain, column i gives, column p gives), per tile."""
    a = ki & ~kp
    b = kp & ~ki
    hi = tl.full(ki.shape, float("-inf"), tl.float32)
    lo = tl.full(ki.shape, float("inf"), tl.float32)
    ja = tl.zeros_like(ki)
    jb = tl.zeros_like(ki)
    for j in tl.static_range(8):
        ta = ((a & (1 << j)) != 0) & (d[j] > hi)
        hi = tl.where(ta, d[j], hi)
        ja = tl.where(ta, j, ja)
        tb = ((b & (1 << j)) != 0) & (d[j] < lo)
        lo = tl.where(tb, d[j], lo)
        jb = tl.where(tb, j, jb)
    hi, ja, lo, jb = tl.reduce((hi, ja + 8 * hh, lo, jb + 8 * hh), 1, _best_combine)
    return hi - lo, ja, jb


'''
PIN = "        t = _pinned(t, (n_tile_cols + it) >> 31)  # n_tile_cols + it < 2^31: a zero\n"


def _module(name: str, pinned: bool) -> object:
    """``_flex_triton`` with the scan ``_best_swap`` of before (``LINEAR``), the tile pinned before
    each sweep or not (``before``), imported from a temporary file."""
    src = Path(ft.__file__).read_text()
    tree = src[src.index("@triton.jit\ndef _tree_best(") : src.index("@triton.jit\ndef _pinned(")]
    assert PIN in src and "def _best_swap(" in tree, "_flex_triton changed: update the probe"
    src = src.replace(tree, LINEAR)
    if not pinned:
        src = src.replace(PIN, "").replace("for it in range(SWEEPS):", "for _ in range(SWEEPS):")
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(smoke: bool) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    mods = {"before": _module("_ft_before", False), "pinned": _module("_ft_pinned", True), "tree": ft}
    shapes = ((16, 48, torch.bfloat16), (24, 40, torch.float32), (32, 64, torch.float32)) if smoke else SHAPES
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
        xs = (8, 16) if smoke and r % 16 == 0 and c % 16 == 0 else (8,)
        for x in xs:
            pattern = TBS(x)
            masks = {name: m.fast_mask_triton(w, pattern, piv, 1, tie) for name, m in mods.items()}
            pattern.validate(masks["before"])
            same = {name: torch.equal(m, masks["before"]) for name, m in masks.items()}
            ok_all &= all(same.values())
            print(f"{r}x{c} {str(dt)[6:]} TBS({x}): masks equal to before: {same}", flush=True)
        if smoke or not ok_all:
            continue
        nbytes = w.numel() * (w.element_size() + 1)
        times: dict[str, list[float]] = {name: [] for name in mods}
        for _round in range(3):
            for name, m in mods.items():
                times[name].append(time_gpu(partial(m.fast_mask_triton, w, TBS(8), piv, 1, tie)).ms)
        base = sorted(times["before"])[1]
        for name, ts in times.items():
            ms = sorted(ts)[1]
            share = 100 * gbps(nbytes, ms) / copy
            rounds = " ".join(f"{t:.3f}" for t in ts)
            print(f"  {name:7s} {ms:7.3f} ms ({rounds}) {share:5.1f}% of copy, {base / ms:4.2f}x", flush=True)
        del w, masks
        torch.cuda.empty_cache()
    if not smoke and ok_all:
        from repro.models.llama import CONFIGS, block_linear_shapes

        shapes460 = block_linear_shapes(CONFIGS["map-neo-460m"])
        today = ft.mask_launch, ft.multi_mask_launches
        for dt in (torch.bfloat16, torch.float32):
            ws = [(0.02 * torch.randn(o, i, device=dev, generator=g)).to(dt) for _n, o, i in shapes460]
            out: dict[str, list] = {}
            for name in ("before", "tree"):
                m = mods[name]  # FlexMasker imports its launch builders from ft when it builds
                pair = (m.mask_launch, m.multi_mask_launches) if m is not ft else today
                ft.mask_launch, ft.multi_mask_launches = pair
                masker = FlexMasker(ws, TBS(8), 0.5, seed=1)
                out[name] = [x.clone() for x in masker()]
                out[name + " ms"] = [time_gpu(partial(masker, check=False)).ms for _ in range(3)]
            ft.mask_launch, ft.multi_mask_launches = today
            same = all(torch.equal(a, b) for a, b in zip(out["before"], out["tree"], strict=True))
            ok_all &= same
            print(f"MAP-NEO 460M block {str(dt)[6:]}, FlexMasker TBS(8) (pivot included): masks equal {same}")
            for name in ("before", "tree"):
                ts = out[name + " ms"]
                print(f"  {name:7s} {sorted(ts)[1]:7.3f} ms ({' '.join(f'{t:.3f}' for t in ts)})", flush=True)
    print("ALL MASKS EQUAL" if ok_all else "MASKS DIFFER", flush=True)


if __name__ == "__main__":
    main("--smoke" in sys.argv)
