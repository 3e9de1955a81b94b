# ruff: noqa: E501
"""Probe (not a suite): where does our cuSPARSELt packing differ from torch._cslt_compress, by
shape, and do products through our packing stay right there? (bf16, random 2:4 operands)"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.cslt_pack import cslt_pack, packed_numel  # noqa: E402

dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
for m, k in (
    ((8192, 8192),)
    if False
    else (
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
    )
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

print("== 8192x8192: is _cslt_compress deterministic, and which packing gives the right rows?", flush=True)
m = k = 8192
idx = torch.rand(m, k // 4, 4, device=dev, generator=g).topk(2, -1).indices
mask = torch.zeros(m, k // 4, 4, dtype=torch.bool, device=dev).scatter_(-1, idx, True).reshape(m, k)
a = torch.randn(m, k, device=dev, generator=g).to(torch.bfloat16) * mask
ours = cslt_pack(a, check=False)
runs = [torch._cslt_compress(a) for _ in range(3)]
n = packed_numel(m, k)
for i in range(1, 3):
    print(
        f" compress run 0 vs {i}: {int((runs[0].reshape(-1)[:n].view(torch.int16) != runs[i].reshape(-1)[:n].view(torch.int16)).sum())} elements differ"
    )
x = ours.reshape(-1).view(torch.int16)[: m * k // 2]
y = runs[0].reshape(-1).view(torch.int16)[: m * k // 2]
bad_rows = sorted({int(i) // (k // 2) for i in (x != y).nonzero().flatten().tolist()})
print(f" rows with differing values: {bad_rows[:10]}")
b = torch.randn(k, 64, device=dev, dtype=torch.bfloat16, generator=g)
ref = a.double() @ b.double()
yo, yt = torch._cslt_sparse_mm(ours, b).double(), torch._cslt_sparse_mm(runs[0], b).double()
for r in bad_rows[:6]:
    eo = float((yo[r] - ref[r]).norm() / ref[r].norm())
    et = float((yt[r] - ref[r]).norm() / ref[r].norm())
    cols = (x.view(m, k // 2)[r] != y.view(m, k // 2)[r]).nonzero().flatten().tolist()
    g0 = cols[0] // 2 if cols else None
    grp = a[r, 4 * g0 : 4 * g0 + 4].float().tolist() if g0 is not None else None
    print(
        f" row {r}: rel err ours {eo:.2e}, torch {et:.2e}; group {g0} dense {grp}; ours {x.view(m, k // 2)[r, 2 * g0 : 2 * g0 + 2].view(torch.bfloat16).tolist()} torch {y.view(m, k // 2)[r, 2 * g0 : 2 * g0 + 2].view(torch.bfloat16).tolist()}"
    )
