"""Probe (not a suite): cuSPARSELt operand packing, torch._cslt_compress vs the fused prune+pack
torch._sparse_semi_structured_tile(use_cutlass=False), on already-2:4 operands of the figure6 FFN
(d=2048 and 4096, 8192 tokens). Checks that both packings give the same GEMM result, then times
each (graph replays) next to the sparse and dense GEMMs."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.transposable import transposable_mask  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

dev, bf = torch.device("cuda"), torch.bfloat16
for d in (2048, 4096):
    f, t = 4 * d, 8192
    w = torch.randn(f, d, device=dev, dtype=bf)
    a = w * transposable_mask(w)  # 2:4 along d and along f
    b = torch.randn(t, d, device=dev, dtype=bf)
    c1 = torch._cslt_compress(a)
    packed, meta, packed_t, meta_t, bitmask = torch._sparse_semi_structured_tile(a, "", False)
    print(
        f"d={d}: compress {tuple(c1.shape)} {c1.dtype}; tile packed {tuple(packed.shape)} {packed.dtype}"
        f" packed_t {tuple(packed_t.shape)} numel {c1.numel()} vs {packed.numel()}",
        flush=True,
    )
    packed = packed.reshape(c1.shape) if packed.numel() == c1.numel() else packed
    packed_t = packed_t.reshape(c1.shape[0] * 0 + a.shape[1], -1) if packed_t.dim() != 2 else packed_t
    y1 = torch._cslt_sparse_mm(c1, b.t(), transpose_result=True)
    y2 = torch._cslt_sparse_mm(packed, b.t(), transpose_result=True)
    y2t = torch._cslt_sparse_mm(packed_t, torch.randn(t, f, device=dev, dtype=bf).t(), transpose_result=True)
    print(
        f"d={d}: packed equal {torch.equal(c1, packed)}, gemm equal {torch.equal(y1, y2)}, shapes {tuple(c1.shape)} "
        f"{tuple(packed.shape)} {tuple(packed_t.shape)} y2t {tuple(y2t.shape)}",
        flush=True,
    )
    ref = b.float() @ a.float().t()
    print(f"   rel err vs dense {float((y2.float() - ref).norm() / ref.norm()):.2e}")
    for name, fn in (
        ("_cslt_compress", partial(torch._cslt_compress, a)),
        ("_sparse_semi_structured_tile (both orientations)", partial(torch._sparse_semi_structured_tile, a, "", False)),
        ("sparse gemm", partial(torch._cslt_sparse_mm, c1, b.t(), transpose_result=True)),
        ("dense gemm", partial(torch.matmul, b, w.t())),
    ):
        try:
            print(f"   {name}: {time_gpu(fn).ms:.3f} ms", flush=True)
        except Exception as e:  # capture refused
            print(f"   {name}: failed {type(e).__name__}: {str(e)[:100]}")
