"""Probe (not a suite): where does our cuSPARSELt packing differ from torch._cslt_compress, by
shape, and do products through our packing stay right there? (bf16, random 2:4 operands)"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels.cslt_pack import cslt_pack, packed_numel  # noqa: E402

dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
for m, k in (
    (4096, 4096),
    (8192, 4096),
    (4096, 8192),
    (8192, 8192),
    (16384, 4096),
    (4096, 16384),
    (2048, 16384),
    (1024, 32768),
    (16384, 8192),
    (8192, 16384),
    (12288, 8192),
    (8192, 12288),
    (16384, 2048),
    (32768, 2048),
):
    idx = torch.rand(m, k // 4, 4, device=dev, generator=g).topk(2, -1).indices
    mask = torch.zeros(m, k // 4, 4, dtype=torch.bool, device=dev).scatter_(-1, idx, True).reshape(m, k)
    a = torch.randn(m, k, device=dev, generator=g).to(torch.bfloat16) * mask
    ours, theirs = cslt_pack(a, check=False), torch._cslt_compress(a)
    n, vals = packed_numel(m, k), m * k // 2
    x, y = ours.reshape(-1).view(torch.int16)[:n], theirs.reshape(-1).view(torch.int16)[:n]
    diff = (x != y).nonzero().flatten()
    nv = int((diff < vals).sum())
    b = torch.randn(k, 256, device=dev, dtype=torch.bfloat16, generator=g)
    ref = (a.float() @ b.float()).double()
    errs = []
    for p in (ours, theirs):
        yv = torch._cslt_sparse_mm(p, b).double()
        errs.append(float((yv - ref).norm() / ref.norm()))
    first = diff[:3].tolist()
    print(
        f"{m}x{k}: shapes {tuple(ours.shape)} {tuple(theirs.shape)} mismatch values {nv} meta {diff.numel() - nv}"
        f" first {[(i - vals) if i >= vals else i for i in first]}; rel err ours {errs[0]:.2e} torch {errs[1]:.2e}",
        flush=True,
    )
    del a, mask, ours, theirs, idx
