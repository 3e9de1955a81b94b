"""GPU probe (device tool): are the cuSPARSELt configurations the fst FFN runs the fastest ones?

Runs one fst FFN fwd+bwd (figure6 shapes) and records every 2:4 GEMM it issues (packed operand,
dense operand, layout). For each, prints what ``mm_search`` returns (alg_id, split_k, split_k_mode,
max alg_id) and times, by CUDA-graph replay (median, L2 flushed), every alg_id with split_k = 1
and with the searched split_k, next to the dense ``torch.mm`` of the same problem.
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_cslt_algs.py [d:N ...]"""

# ruff: noqa: B023 (each lambda is timed before the loop moves on)
from __future__ import annotations

import sys

import torch

import kernels.ops.sparse_gemm as sg
from repro.timing import time_fn
from suites import figure6
from suites._training_bench import amp, fwd_bwd

DEV = torch.device("cuda")


def record(d: int, batch: int) -> list:
    seen: dict = {}
    orig = sg._search_config

    def spy(compressed, b, transpose_result, key):
        seen.setdefault(key, (compressed.clone(), b.clone(), transpose_result))
        return orig(compressed, b, transpose_result, key)

    sg._search_config = spy
    try:
        n = figure6.FFN_N
        cfg = figure6._cfg(d, n)
        mod = figure6._build("ffn", cfg, "fst", DEV)
        x = torch.randn(batch, n, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(batch, n, d, device=DEV, dtype=torch.bfloat16) * 0.1
        with amp(DEV):
            fwd_bwd(mod, x, dy)()
        torch.cuda.synchronize()
    finally:
        sg._search_config = orig
    return list(seen.items())


def probe(d: int, batch: int) -> None:
    for key, (packed, b, tr) in record(d, batch):
        a_shape = key[1]
        m, k = a_shape
        nn = b.shape[1]
        found = torch._C._cusparselt.mm_search(packed, b, None, None, None, tr)
        found = found if isinstance(found, tuple) else (found,)
        a_dense = torch.randn(m, k, device=DEV, dtype=b.dtype)
        dense = time_fn(lambda: torch.mm(a_dense, b), DEV).ms
        flop = 2 * m * k * nn
        print(
            f"A {m}x{k} B {tuple(b.shape)} stride {b.stride()} transpose_result={tr}: mm_search -> {found}; "
            f"dense mm {dense:.4f} ms ({flop / dense / 1e9:.0f} TFLOP/s)",
            flush=True,
        )
        max_alg = int(found[3]) if len(found) > 3 else 1
        split_ks = sorted({1, int(found[1])} if len(found) > 1 else {1})
        for alg in range(max(max_alg, 1)):
            for sk in split_ks:

                def call(alg=alg, sk=sk):
                    return torch._cslt_sparse_mm(packed, b, transpose_result=tr, alg_id=alg, split_k=sk)

                try:
                    ms = time_fn(call, DEV).ms
                except RuntimeError as e:
                    print(f"    alg {alg} split_k {sk}: {str(e).splitlines()[0][:80]}", flush=True)
                    continue
                mark = " <- chosen" if (alg, sk) == sg._ALG_CACHE.get(key, (None, None))[:2] else ""
                mark += " <- searched" if (alg, sk) == (int(found[0]), int(found[1]) if len(found) > 1 else 1) else ""
                mark += " <- what we run" if (alg, sk) == (int(found[0]), 1) else ""
                print(f"    alg {alg} split_k {sk}: {ms:.4f} ms  {dense / ms:.2f}x dense{mark}", flush=True)


if __name__ == "__main__":
    shapes = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(2048, 4)]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for d, batch in shapes:
        print(f"== ffn d={d} N={batch}", flush=True)
        probe(d, batch)
