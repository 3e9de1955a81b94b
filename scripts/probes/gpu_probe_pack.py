# ruff: noqa: E501, B023
"""Probe (not a suite): kernels.ops.cslt_pack on the GPU. (1) bit-equality with torch._cslt_compress
(where a mismatch sits: values or metadata), GEMM products through the packed operand; (2) device
time of our packing vs _cslt_compress vs a copy of the same bytes, at figure6 FFN shapes."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.cslt_pack import cslt_pack, cslt_pack_mvue_t, cslt_pack_pair, layout_matches  # noqa: E402
from kernels.ops.mvue import mvue24_seed_tensor  # noqa: E402
from kernels.ops.transposable import transposable_mask  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)


def rand24(m: int, k: int) -> torch.Tensor:
    idx = torch.rand(m, k // 4, 4, device=dev, generator=g).topk(2, -1).indices
    return torch.zeros(m, k // 4, 4, dtype=torch.bool, device=dev).scatter_(-1, idx, True).reshape(m, k)


def compare(tag: str, ours: torch.Tensor, theirs: torch.Tensor, m: int, k: int) -> None:
    a, b = ours.reshape(-1).view(torch.int16), theirs.reshape(-1).view(torch.int16)
    vals = m * k // 2
    n = m * k // 2 + (-(-m // 64) * 64) * k // 16
    a, b = a[:n], b[:n]
    if a.numel() != b.numel():
        print(f"  {tag}: numel {a.numel()} vs {b.numel()} shapes {tuple(ours.shape)} {tuple(theirs.shape)}")
        return
    diff = (a != b).nonzero().flatten()
    nv = int((diff < vals).sum())
    first = diff[:5].tolist()
    print(
        f"  {tag}: shapes {tuple(ours.shape)} vs {tuple(theirs.shape)}; mismatches values {nv}, "
        f"meta {diff.numel() - nv} (of {vals} / {a.numel() - vals}); first {first}"
    )


for dt in (torch.bfloat16, torch.float16):
    print(f"== {dt}: layout_matches {layout_matches(dev, dt)}", flush=True)
    for m, k in ((128, 256), (96, 128), (3072, 768), (768, 8192)):
        a = torch.randn(m, k, device=dev, generator=g).to(dt)
        mask = rand24(m, k)
        am = a * mask
        theirs = torch._cslt_compress(am)
        print(f" {m}x{k}", flush=True)
        compare("mask", cslt_pack(a, mask), theirs, m, k)
        compare("nomask", cslt_pack(am), theirs, m, k)
        b = torch.randn(k, 256, device=dev, dtype=dt, generator=g)
        y = torch._cslt_sparse_mm(cslt_pack(a, mask), b)
        ref = am.double() @ b.double()
        print(f"  gemm rel err {float((y.double() - ref).norm() / ref.norm()):.2e}")
    w = torch.randn(1024, 512, device=dev, generator=g)
    tm = transposable_mask(w)
    p, pt = cslt_pack_pair(w, tm, dtype=dt)
    wm = (w * tm).to(dt)
    compare("pair W", p, torch._cslt_compress(wm), 1024, 512)
    compare("pair W^T", pt, torch._cslt_compress(wm.t().contiguous()), 512, 1024)

print("== timing (bf16, graph replays, read flush)", flush=True)
bf = torch.bfloat16
seed = mvue24_seed_tensor(dev)
for d in (768, 2048, 4096):
    t_tok, f = 8192, 4 * d
    w1 = torch.randn(f, d, device=dev, generator=g)
    m1 = transposable_mask(w1)
    dh = torch.randn(f, t_tok, device=dev, dtype=bf, generator=g)
    mh = rand24(f, t_tok)
    dhm = dh * mh
    w1m = (w1 * m1).to(bf)
    cases = {
        "grad pack (no mask)": (partial(cslt_pack, dhm, check=False), dhm.numel() * 2 * 1.5625),
        "grad pack (mask)": (partial(cslt_pack, dh, mh, check=False), dhm.numel() * 3 * 1.5625 / 1.5625 + dhm.numel()),
        "grad _cslt_compress": (partial(torch._cslt_compress, dhm), dhm.numel() * 2 * 1.5625),
        "grad copy": (partial(torch.clone, dhm), dhm.numel() * 4),
        "grad mvue+transpose+pack fused [T, 4d] -> [4d, T]": (
            partial(cslt_pack_mvue_t, dh.t().contiguous(), seed),
            dhm.numel() * (2 + 1.125),
        ),
        "weight pair fp32+mask": (
            partial(cslt_pack_pair, w1, m1, dtype=bf, check=False),
            w1.numel() * (4 + 1 + 2 * 1.125),
        ),
        "weight where+2x_cslt_compress": (
            lambda: (torch._cslt_compress(torch.where(m1, w1.to(bf), 0.0)), torch._cslt_compress(w1m.t().contiguous())),
            w1.numel() * (4 + 1 + 2 * 1.125),
        ),
        "weight pack one orientation": (
            partial(cslt_pack, w1, m1, dtype=bf, check=False),
            w1.numel() * (4 + 1 + 1.125),
        ),
    }
    for name, (fn, nbytes) in cases.items():
        try:
            t = time_gpu(fn)
            print(f" d={d} {name}: {t.ms:.4f} ms, {nbytes / t.ms / 1e6:.0f} GB/s ({t.timer})", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f" d={d} {name}: failed {type(e).__name__}: {str(e)[:120]}")
