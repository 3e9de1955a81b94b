"""Tuning sweep on a GPU (not part of the suites): block shapes of the transposable-mask and
GEGLU kernels, plus a cuSPARSELt plumbing check. Writes a CSV to $OUT (or ./sweep_out).

    python scripts/probes/gpu_sweep.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.ops._transposable_triton import transposable24_kernel  # noqa: E402
from kernels.ops.transposable import (  # noqa: E402
    exhaustive_triton,
    is_transposable_24,
    transposable_mask,
    transposable_mask_reference,
)

OUT = Path(os.environ.get("OUT", "sweep_out"))
OUT.mkdir(parents=True, exist_ok=True)
rows = []


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def copy_bw():
    x = torch.randn(512 * 2**20, device="cuda")
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    return 2 * x.numel() * 4 / ms / 1e6


COPY = copy_bw()
print(f"copy {COPY:.0f} GB/s", flush=True)


def sweep_transposable():
    for r, c in [(3072, 768), (8192, 2048), (16384, 4096), (30768, 8192)]:
        for dt in (torch.float16, torch.float32):
            w = torch.randn(r, c, device="cuda", dtype=dt)
            ref = transposable_mask_reference(w)
            nbytes = w.numel() * (w.element_size() + 1)
            for tr in (1, 2, 4, 8):
                for tc in (16, 32, 64, 128):
                    for warps in (2, 4, 8):
                        out = torch.empty(r, c, dtype=torch.bool, device="cuda")
                        grid = (triton.cdiv(r // 4, tr), triton.cdiv(c // 4, tc))

                        def f(out=out, grid=grid, tr=tr, tc=tc, warps=warps, w=w, r=r, c=c):
                            transposable24_kernel[grid](
                                w,
                                out.view(torch.int8),
                                r // 4,
                                c // 4,
                                w.stride(0),
                                out.stride(0),
                                TR=tr,
                                TC=tc,
                                num_warps=warps,
                            )

                        try:
                            f()
                            torch.cuda.synchronize()
                        except Exception as e:  # noqa: BLE001
                            print("fail", tr, tc, warps, e)
                            continue
                        agree = (out == ref).float().mean().item()
                        ms = bench(f)
                        gb = nbytes / ms / 1e6
                        rows.append(
                            dict(
                                kernel="transposable",
                                shape=f"{r}x{c}",
                                dtype=str(dt),
                                tr=tr,
                                tc=tc,
                                warps=warps,
                                ms=ms,
                                gbps=gb,
                                pct=100 * gb / COPY,
                                agree=agree,
                            )
                        )
            best = max((x for x in rows if x["shape"] == f"{r}x{c}" and x["dtype"] == str(dt)), key=lambda x: x["gbps"])
            default_ms = bench(lambda w=w: exhaustive_triton(w))
            a2 = transposable_mask(w, method="approx2")
            a2_ms = bench(lambda w=w: transposable_mask(w, method="approx2"))
            ref_ms = bench(lambda w=w: transposable_mask_reference(w))
            print(
                f"{r}x{c} {dt}: best {best['tr']},{best['tc']},{best['warps']} {best['gbps']:.0f} GB/s "
                f"({best['pct']:.0f}%) agree={best['agree']:.4f} | default {nbytes / default_ms / 1e6:.0f} GB/s"
                f" | approx2 {a2_ms:.3f} ms valid={is_transposable_24(a2)} ratio {a2_ms / default_ms:.1f}x"
                f" | torch-ref {ref_ms:.3f} ms",
                flush=True,
            )


def sweep_geglu():
    try:
        from kernels import geglu, geglu_intuitive
    except Exception as e:  # noqa: BLE001
        print("geglu import failed", e)
        return
    for d in (768, 2048, 8192):
        z = torch.randn(d, 16384, device="cuda", dtype=torch.float16).t()
        nbytes = z.numel() * 2 + z.numel()
        for name, fn in [
            ("ours", lambda z=z: geglu(z, approximate="tanh")),
            ("intuitive", lambda z=z: geglu_intuitive(z, approximate="tanh")),
            ("eager", lambda z=z, d=d: torch.nn.functional.gelu(z[:, : d // 2], approximate="tanh") * z[:, d // 2 :]),
        ]:
            ms = bench(fn)
            gb = nbytes / ms / 1e6
            rows.append(
                dict(kernel="geglu_" + name, shape=f"16384x{d}", dtype="fp16", ms=ms, gbps=gb, pct=100 * gb / COPY)
            )
            print(f"geglu {name} d={d}: {gb:.0f} GB/s ({100 * gb / COPY:.0f}%)", flush=True)


def check_cusparselt():
    from kernels import Sparse24Weight

    for p, q, r in [(8192, 768, 3072), (16384, 2048, 8192)]:
        w = torch.randn(r, q, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(p, q, device="cuda", dtype=torch.bfloat16)
        sw = Sparse24Weight(w)
        y = sw.linear(x)
        ref = torch.nn.functional.linear(x.float(), sw.pruned.float())
        err = ((y.float() - ref).norm() / ref.norm()).item()
        print(
            f"cusparselt {p},{q},{r}: backend={sw.backend} reason={sw.fallback_reason} alg={sw.alg_id(x)} "
            f"err={err:.2e}",
            flush=True,
        )


t0 = time.time()
for part in (check_cusparselt, sweep_geglu, sweep_transposable):
    try:
        part()
    except Exception as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        print(f"{part.__name__} failed: {e}")
    pd.DataFrame(rows).to_csv(OUT / "sweep.csv", index=False)
print(f"done in {time.time() - t0:.0f}s")
