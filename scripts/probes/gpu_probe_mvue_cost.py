"""GPU probe (device tool): where the time of the fused GELU backward + MVUE pack goes. Variants
of the kernel with one piece removed or cheapened (outputs not valid, timing only): no Philox
(u = 0.5), Philox with 7 rounds, no metadata words, no activation (dH = G), no MVUE (first two
kept). Shape: the fst FFN's dH at d = 2048, N = 4 ([8192, 8192], column-major).
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_mvue_cost.py"""

# ruff: noqa: B023 (each closure is timed before the loop moves on)
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops._cslt_pack_triton import _bits16
from kernels.ops.cslt_pack import _alloc
from kernels.ops.geglu import act_and_grad
from kernels.ops.mvue import _mvue_group
from repro.timing import time_fn

DEV = torch.device("cuda")


@triton.jit
def _variant(
    h_ptr,
    g_ptr,
    dh_ptr,
    out32_ptr,
    meta_ptr,
    seed_ptr,
    m,
    k,
    stride_ar,
    BK: tl.constexpr,
    RAND: tl.constexpr,
    META: tl.constexpr,
    ACT: tl.constexpr,
    MVUE: tl.constexpr,
):
    rt = tl.program_id(0)
    c0 = tl.program_id(1) * BK
    rows = rt * 64 + tl.arange(0, 64)
    cols = c0 + tl.arange(0, BK)
    offs = rows[:, None].to(tl.int64) * stride_ar + cols[None, :].to(tl.int64)
    inb = rows[:, None] < m
    gr = tl.load(g_ptr + offs, mask=inb, other=0.0).to(tl.float32)
    if ACT:
        h = tl.load(h_ptr + offs, mask=inb, other=0.0).to(tl.float32)
        _, dact = act_and_grad(h, 1)
        dh = (gr * dact).to(tl.bfloat16)
    else:
        dh = gr.to(tl.bfloat16)
    tl.store(dh_ptr + offs, dh, mask=inb)
    x = dh.to(tl.float32)
    valid = inb
    x4 = tl.reshape(x, (64, BK // 4, 2, 2))
    xe, xo = tl.split(x4)
    x0, x2 = tl.split(xe)
    x1, x3 = tl.split(xo)
    quad = rows[:, None].to(tl.int64) * (k // 16) + c0 // 16 + tl.arange(0, BK // 16)[None, :]
    if RAND == 10:
        r0, r1, r2, r3 = tl.rand4x(tl.load(seed_ptr), quad)
        u = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (64, BK // 4))
    elif RAND == 7:
        r0, r1, r2, r3 = tl.rand4x(tl.load(seed_ptr), quad, n_rounds=7)
        u = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (64, BK // 4))
    else:
        u = tl.full((64, BK // 4), 0.5, tl.float32)
    if MVUE:
        o0, o1, o2, o3, k0, k1, k2, k3 = _mvue_group(x0, x1, x2, x3, u)
    else:
        o0, o1, o2, o3 = x0, x1 + u, x2, x3
        k0 = x0 > x1
        k1 = x1 >= x0
        k2 = x2 > x3
        k3 = x3 >= x2
    lo = _bits16(tl.where(k0, o0, tl.where(k1, o1, o2)), True)
    hi = _bits16(tl.where(k3, o3, tl.where(k2, o2, o1)), True)
    g = c0 // 4 + tl.arange(0, BK // 4)
    tl.store(out32_ptr + rows[:, None].to(tl.int64) * (k // 4) + g[None, :], lo | (hi << 16), mask=valid)
    if META:
        i0 = tl.where(k0, 0, tl.where(k1, 1, 2))
        i1 = tl.where(k3, 3, tl.where(k2, 2, 1))
        code = tl.where(valid, i0 | (i1 << 2), 14)
        c6 = tl.reshape(code, (4, 2, 8, BK // 32, 2, 4))
        hh = tl.arange(0, 2)[None, :, None, None, None, None]
        gh = tl.arange(0, 2)[None, None, None, None, :, None]
        word = tl.sum(tl.sum(c6 << (4 * (2 * gh + hh)), axis=4), axis=1)
        rb = tl.arange(0, 4)[:, None, None, None]
        rr = tl.arange(0, 8)[None, :, None, None]
        kb = tl.arange(0, BK // 32)[None, None, :, None]
        gq = tl.arange(0, 4)[None, None, None, :]
        block = (rt * (k // 32) + c0 // 32 + kb) * 4 + rb
        tl.store(meta_ptr + block.to(tl.int64) * 32 + rr * 4 + gq, word.to(tl.int16))


def main() -> None:
    t, f = 8192, 8192
    gen = torch.Generator(device=DEV).manual_seed(0)
    h = torch.randn(f, t, device=DEV, generator=gen).bfloat16()  # [f, T] contiguous = H^T
    g = torch.randn(f, t, device=DEV, generator=gen).bfloat16()
    dh = torch.empty_like(h)
    out = _alloc(f, t, torch.bfloat16, DEV)
    flat16 = out.view(torch.int16)
    vals = f * t // 2
    seed = torch.tensor([3], dtype=torch.int64, device=DEV)
    variants = {
        "full": dict(RAND=10, META=True, ACT=True, MVUE=True),
        "philox 7 rounds": dict(RAND=7, META=True, ACT=True, MVUE=True),
        "no philox": dict(RAND=0, META=True, ACT=True, MVUE=True),
        "no metadata": dict(RAND=10, META=False, ACT=True, MVUE=True),
        "no activation": dict(RAND=10, META=True, ACT=False, MVUE=True),
        "no mvue math": dict(RAND=10, META=True, ACT=True, MVUE=False),
        "no philox, no mvue": dict(RAND=0, META=True, ACT=True, MVUE=False),
        "copy-like: no philox/mvue/meta/act": dict(RAND=0, META=False, ACT=False, MVUE=False),
    }
    for bk, warps in ((64, 8), (64, 4), (128, 8)):
        for name, kw in variants.items():

            def run() -> None:
                _variant[(f // 64, t // bk)](
                    h,
                    g,
                    dh,
                    flat16[:vals].view(torch.int32),
                    flat16[vals:],
                    seed,
                    f,
                    t,
                    t,
                    BK=bk,
                    num_warps=warps,
                    **kw,
                )  # noqa: B023

            tm = time_fn(run, DEV)
            print(f"BK={bk} warps={warps} {name:38s} {tm.ms:.3f} ms", flush=True)
    tm = time_fn(lambda: torch.ops.aten.gelu_backward(g, h, approximate="tanh"), DEV)
    print(f"torch gelu_backward alone {tm.ms:.3f} ms; copy of h {time_fn(lambda: dh.copy_(h), DEV).ms:.3f} ms")


if __name__ == "__main__":
    main()
