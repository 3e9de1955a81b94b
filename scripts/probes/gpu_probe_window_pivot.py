"""Probe (not a suite): the window pivot against the two histogram passes, by part, on the H100.

``kernels.ops._pivot_triton.window_pivot_launches`` (a 1/32 sample's two passes place a 16-key
window; one counting pass, no per-value atomics; the exact passes only on a miss) against the
two ``tl.histogram`` passes + ``select16`` it replaces in ``FlexMasker``. Checks first (state bit
for bit, #(above), #(equal), whether the window missed), then device time (CUDA-graph replays, L2
flushed, median): whole, and each part (the sample's passes, the counting pass, its select, the
idle guarded fallback, the fallback forced), on a MAP-NEO 460M and a 7B block, normal and
row-scaled weights, densities 0.5 / 0.25; windows of 8 and 16 keys. The grid and warp sweep
behind the defaults is results/tuning/h100_probe_window_pivot_sweep.txt (an earlier version of
this probe, at abf9f27).

    python3 scripts/probes/gpu_probe_window_pivot.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops import _pivot_triton as pt  # noqa: E402
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402
from repro.roofline import measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402


def weights(shapes, kind: str, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for o, i in shapes:
        w = 0.02 * torch.randn(o, i, device="cuda", generator=gen)
        if kind == "rows":
            w = w * torch.rand(o, 1, device="cuda", generator=gen).add(0.25)
            w = w * torch.rand(1, i, device="cuda", generator=gen).add(0.5)
        out.append(w.to(torch.bfloat16))
    return out


def run(launches) -> None:
    for kernel, grid, args, warps in launches:
        kernel[grid](*args, num_warps=warps)


def main() -> None:
    copy = measure_ceilings(torch.device("cuda")).copy_gbps
    print(f"{torch.cuda.get_device_name()}; copy {copy:.0f} GB/s; torch {torch.__version__}")
    for model in ("map-neo-460m", "map-neo-7b"):
        shapes = [(o, i) for _, o, i in block_linear_shapes(CONFIGS[model])]
        for kind, density in (("normal", 0.5), ("rows", 0.25)):
            ws = weights(shapes, kind)
            n = sum(w.numel() for w in ws)
            k = round(density * n)
            flats = [w.reshape(-1).view(torch.int16) for w in ws]
            two = torch.zeros(pt.COUNTS_LEN, dtype=torch.int64, device="cuda")
            st2 = torch.zeros(2, device="cuda")
            groups = [flats[i : i + pt.MAX_TENSORS] for i in range(0, len(flats), pt.MAX_TENSORS)]
            two_l = [pt.hist16_launch(g, two, k, p) for p in (1, 2) for g in groups]
            two_l.append(pt.select16_launch(two, st2, k, torch.bfloat16, True))
            cw = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64, device="cuda")
            stw = torch.zeros(2, device="cuda")
            win_l = pt.window_pivot_launches(
                flats, cw, stw, k, torch.bfloat16, fallback_programs=1024, fuse_select=False
            )
            run(two_l)
            run(win_l)
            same = torch.equal(st2.view(torch.int32), stw.view(torch.int32)) and torch.equal(
                two[pt.NONFINITE :], cw[pt.NONFINITE : pt.COUNTS_LEN]
            )
            miss = int(cw[pt.FLAG_AT])
            verdict = f"{'EQUAL' if same else 'DIFFER'} to the two passes; window {'MISSED' if miss else 'hit'}"
            print(f"\n{model} {kind} bf16, {n / 1e6:.1f}M values, density {density}: {verdict}")
            if not same:
                continue

            def report(name: str, launches, reads: float, n: int = n) -> None:
                t = time_gpu(lambda launches=launches: run(launches))
                gb = reads * 2 * n / (t.ms * 1e-3) / 1e9
                print(f"  {name:46s} {t.ms * 1e3:8.1f} us {100 * gb / copy:6.1f}% of copy ({reads:g} reads)")

            ng = len(groups)
            report("two passes + select16 (today)", two_l, 2)
            report("window pivot, whole", win_l, 1 + 2 / 32)
            report("  sample: two passes (1/32)", win_l[: 2 * ng], 2 / 32)
            report("  counting pass", win_l[2 * ng : 3 * ng], 1)
            report("  idle guarded fallback (3 launches)", win_l[3 * ng + 1 :], 0)
            for w in (8, 16):  # does the narrower window still hold rank k at this size?
                cw.zero_()
                stw.zero_()
                run(pt.window_pivot_launches(flats, cw, stw, k, torch.bfloat16, window=w, fuse_select=False))
                eq = torch.equal(st2.view(torch.int32), stw.view(torch.int32))
                hit = "MISSED" if int(cw[pt.FLAG_AT]) else "hit"
                print(f"  window of {w} keys: {'EQUAL' if eq else 'DIFFER'}, {hit}")
            cw.zero_()
            for w in (8, 16):
                cl = pt.window_pivot_launches(flats, cw, stw, k, torch.bfloat16, window=w, fuse_select=False)
                report(f"  counting pass, {w} keys", cl[2 * ng : 3 * ng], 1)
            cw[pt.FLAG_AT] = 1  # the fallback forced (only the select of the window clears the flag)
            report("  fallback forced (exact passes + select16)", win_l[3 * ng + 1 :], 2)
            cw.zero_()


if __name__ == "__main__":
    main()
