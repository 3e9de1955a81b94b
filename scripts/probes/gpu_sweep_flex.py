"""Tuning sweep (not a suite): launch parameters of FAST's fused mask kernels on a 13B FFN weight,
and the cost of the pivot select on a MAP-NEO 460M block. Every configuration's mask must equal the
default's (checked) before its time counts. Prints GB/s and % of the measured copy bandwidth."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import kernels.ops._flex_triton as ft  # noqa: E402
from kernels.ops.flex import tie_share  # noqa: E402
from kernels.ops.patterns import parse_pattern  # noqa: E402
from kernels.ops.pivot import find_pivot, pivot_and_tie_16bit, pivot_and_tie_16bit_reference  # noqa: E402
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402
from repro.roofline import measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

dev = torch.device("cuda")
copy = measure_ceilings(dev).copy_gbps
print(f"copy {copy:.0f} GB/s")
g = torch.Generator(device=dev).manual_seed(0)
w = (0.02 * torch.randn(13824, 5120, device=dev, generator=g)).bfloat16()
piv = find_pivot(w, 0.5, method="exact")
tie = tie_share(w, piv, 0.5)
nbytes = w.numel() * 3
for spec in ("2:4", "Vegeta(4)", "Vegeta(8)", "TBS(8)", "TBS(4)"):
    pat = parse_pattern(spec)
    ref = ft.fast_mask_triton(w, pat, piv, 1, tie)
    if spec.startswith("TBS(8"):
        grid = [
            ("CIRCULANT_ELEMS", "CIRCULANT_WARPS", None, e, nw, None)
            for e in (1024, 2048, 4096, 8192)
            for nw in (2, 4, 8)
        ]
    elif spec.startswith("TBS"):
        grid = [(None, None, None, 0, 0, None)]
    else:
        grid = [("GROUPS_ELEMS", "GROUPS_WARPS", None, e, nw, None) for e in (1024, 2048, 4096, 8192) for nw in (4, 8)]
    for ke, kw, kv, e, nw, v in grid:
        old = {k: getattr(ft, k) for k in (ke, kw, kv) if k}
        if ke:
            setattr(ft, ke, e)
            setattr(ft, kw, nw)
        if kv:
            setattr(ft, kv, v)
        try:
            out = ft.fast_mask_triton(w, pat, piv, 1, tie)
            same = torch.equal(out, ref)
            t = time_gpu(partial(ft.fast_mask_triton, w, pat, piv, 1, tie))
            bw = nbytes / t.ms / 1e6
            print(
                f"{spec:10s} elems={e:5d} warps={nw} vec={v}: {t.ms:.3f} ms {bw:.0f} GB/s {100 * bw / copy:.1f}%"
                f" {'OK' if same else 'MASK DIFFERS'}",
                flush=True,
            )
        except Exception as ex:  # a configuration Triton cannot build
            print(f"{spec:10s} elems={e} warps={nw} vec={v}: failed {type(ex).__name__}: {str(ex)[:120]}")
        finally:
            for k, val in old.items():
                setattr(ft, k, val)
# pivot of one MAP-NEO 460M block (7 bf16 weights, 13.6M values)
cfg = CONFIGS["map-neo-460m"]
ws = [(0.02 * torch.randn(o, i, device=dev, generator=g)).bfloat16() for _, o, i in block_linear_shapes(cfg)]
exact = find_pivot(ws, 0.5, method="exact")
got = pivot_and_tie_16bit(ws, 0.5)
print("pivot equal:", got == (exact, tie_share(ws, exact, 0.5)), got == pivot_and_tie_16bit_reference(ws, 0.5))
for name, fn in (
    ("histogram triton", partial(pivot_and_tie_16bit, ws, 0.5)),
    ("histogram bincount", partial(pivot_and_tie_16bit_reference, ws, 0.5)),
    ("topk + tie count", lambda: (find_pivot(ws, 0.5, method="exact"), tie_share(ws, exact, 0.5))),
):
    t = time_gpu(fn, graph=False)
    print(f"460M block pivot {name}: {t.ms:.3f} ms (eager, host included)", flush=True)
pat = parse_pattern("TBS(4)")
t = time_gpu(lambda: [ft.fast_mask_triton(x, pat, exact, 1, 0.5) for x in ws], graph=False)
tg = time_gpu(lambda: [ft.fast_mask_triton(x, pat, exact, 1, 0.5) for x in ws], graph=True)
print(f"460M block TBS(4) masks: eager {t.ms:.3f} ms, graph {tg.ms:.3f} ms")
