"""GPU probe (device tool): equivalent formulations of the fused GELU backward + MVUE pack, each
bit-checked against the production kernel (values, metadata and dH) before its time counts:
uniforms joined from one Philox call per 4 groups (production) or selected per group from the
same call (no join / reshape of the uniforms; 4x the Philox work); metadata words by sums over
reshaped axes (production) or by splits of a permuted code tile; tile widths and warps.
Shape: the fst FFN's dH at d = 2048, N = 4 ([8192, 8192], column-major).
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_mvue_variants.py"""

# ruff: noqa: B023 (each closure is timed before the loop moves on)
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.ops._cslt_pack_triton import _bits16
from kernels.ops.cslt_pack import _alloc, cslt_gelu_backward_mvue_pack_t
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
    RANDV: tl.constexpr,
    METAV: tl.constexpr,
):
    rt = tl.program_id(0)
    c0 = tl.program_id(1) * BK
    rows = rt * 64 + tl.arange(0, 64)
    cols = c0 + tl.arange(0, BK)
    offs = rows[:, None].to(tl.int64) * stride_ar + cols[None, :].to(tl.int64)
    inb = rows[:, None] < m
    h = tl.load(h_ptr + offs, mask=inb, other=0.0).to(tl.float32)
    gr = tl.load(g_ptr + offs, mask=inb, other=0.0).to(tl.float32)
    _, dact = act_and_grad(h, 1)
    dh = (gr * dact).to(tl.bfloat16)
    tl.store(dh_ptr + offs, dh, mask=inb)
    x = dh.to(tl.float32)
    valid = inb
    x4 = tl.reshape(x, (64, BK // 4, 2, 2))
    xe, xo = tl.split(x4)
    x0, x2 = tl.split(xe)
    x1, x3 = tl.split(xo)
    if RANDV == 0:
        quad = rows[:, None].to(tl.int64) * (k // 16) + c0 // 16 + tl.arange(0, BK // 16)[None, :]
        r0, r1, r2, r3 = tl.rand4x(tl.load(seed_ptr), quad)
        u = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (64, BK // 4))
    else:
        gi = c0 // 4 + tl.arange(0, BK // 4)[None, :]
        quad = rows[:, None].to(tl.int64) * (k // 16) + gi // 4
        r0, r1, r2, r3 = tl.rand4x(tl.load(seed_ptr), quad)
        q = gi % 4
        u = tl.where(q == 0, r0, tl.where(q == 1, r1, tl.where(q == 2, r2, r3)))
    o0, o1, o2, o3, k0, k1, k2, k3 = _mvue_group(x0, x1, x2, x3, u)
    lo = _bits16(tl.where(k0, o0, tl.where(k1, o1, o2)), True)
    hi = _bits16(tl.where(k3, o3, tl.where(k2, o2, o1)), True)
    g = c0 // 4 + tl.arange(0, BK // 4)
    tl.store(out32_ptr + rows[:, None].to(tl.int64) * (k // 4) + g[None, :], lo | (hi << 16), mask=valid)
    i0 = tl.where(k0, 0, tl.where(k1, 1, 2))
    i1 = tl.where(k3, 3, tl.where(k2, 2, 1))
    code = tl.where(valid, i0 | (i1 << 2), 14)
    c6 = tl.reshape(code, (4, 2, 8, BK // 32, 2, 4))  # [rb, h, rr, kb, gh, gq]
    if METAV == 0:
        hh = tl.arange(0, 2)[None, :, None, None, None, None]
        gh = tl.arange(0, 2)[None, None, None, None, :, None]
        word = tl.sum(tl.sum(c6 << (4 * (2 * gh + hh)), axis=4), axis=1)
    else:
        cp = tl.permute(c6, (0, 2, 3, 5, 1, 4))  # [rb, rr, kb, gq, h, gh]
        ca, cb = tl.split(cp)  # gh = 0, 1
        c00, c10 = tl.split(ca)  # h = 0, 1
        c01, c11 = tl.split(cb)
        word = c00 | (c10 << 4) | (c01 << 8) | (c11 << 12)
    rb = tl.arange(0, 4)[:, None, None, None]
    rr = tl.arange(0, 8)[None, :, None, None]
    kb = tl.arange(0, BK // 32)[None, None, :, None]
    gq = tl.arange(0, 4)[None, None, None, :]
    block = (rt * (k // 32) + c0 // 32 + kb) * 4 + rb
    tl.store(meta_ptr + block.to(tl.int64) * 32 + rr * 4 + gq, word.to(tl.int16))


def main() -> None:
    t, f = 8192, 8192
    gen = torch.Generator(device=DEV).manual_seed(0)
    ht = torch.randn(f, t, device=DEV, generator=gen).bfloat16()  # [f, T] contiguous = H^T
    gt = torch.randn(f, t, device=DEV, generator=gen).bfloat16()
    seed = torch.tensor([3], dtype=torch.int64, device=DEV)
    ref_dh, ref = cslt_gelu_backward_mvue_pack_t(ht.t(), gt.t(), seed, "tanh")
    ref_bits = ref.reshape(-1).view(torch.int16)
    n = ref_bits.numel()
    vals = f * t // 2
    for bk in (32, 64, 128):
        for warps in (2, 4, 8, 16):
            for randv in (0, 1):
                for metav in (0, 1):
                    out = _alloc(f, t, torch.bfloat16, DEV)
                    flat16 = out.view(torch.int16)
                    dh = torch.empty_like(ht)

                    def run() -> None:
                        _variant[(f // 64, t // bk)](
                            ht,
                            gt,
                            dh,
                            flat16[:vals].view(torch.int32),
                            flat16[vals:],
                            seed,
                            f,
                            t,
                            t,
                            BK=bk,
                            RANDV=randv,
                            METAV=metav,
                            num_warps=warps,
                        )

                    try:
                        seed.fill_(3)
                        run()
                    except Exception as e:  # noqa: BLE001
                        print(f"BK={bk} w={warps} rand={randv} meta={metav}: {type(e).__name__} {str(e)[:80]}")
                        continue
                    ok = torch.equal(flat16[:n], ref_bits) and torch.equal(dh, ref_dh.t())
                    tm = time_fn(run, DEV)
                    print(
                        f"BK={bk:3d} w={warps:2d} rand={randv} meta={metav}: {'ok ' if ok else 'BAD'} {tm.ms:.3f} ms",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
