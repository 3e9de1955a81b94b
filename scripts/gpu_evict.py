"""Experiment (not part of the suites): do L2 streaming hints (evict_first loads, .cs stores)
lift the flat GEGLU kernel at 32x512xd? Graph-timed like the suites; prints % of copy."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels.geglu import _GELU_TANH, _act, _fwd_flat_kernel  # noqa: E402
from repro.timing import time_gpu  # noqa: E402


@triton.jit
def flat_hint(z_ptr, out_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr, EVICT: tl.constexpr, CS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if EVICT:
        g = tl.load(z_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        u = tl.load(z_ptr + n + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    else:
        g = tl.load(z_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(z_ptr + n + offs, mask=mask, other=0.0).to(tl.float32)
    y = (_act(g, ACT) * u).to(out_ptr.dtype.element_ty)
    if CS:
        tl.store(out_ptr + offs, y, mask=mask, cache_modifier=".cs")
    else:
        tl.store(out_ptr + offs, y, mask=mask)


big = torch.randn(512 * 2**20, device="cuda")
big2 = torch.empty_like(big)
COPY = 2 * big.numel() * 4 / time_gpu(partial(big2.copy_, big), graph=False).ms / 1e6
del big, big2
print(f"copy {COPY:.0f} GB/s")
for d in (768, 2048, 4096, 8192):
    z = torch.randn(d, 16384, device="cuda", dtype=torch.float16)
    out = torch.empty(d // 2, 16384, device="cuda", dtype=torch.float16)
    n = out.numel()
    nbytes = z.numel() * 2 + n * 2
    ref = torch.empty_like(out)
    _fwd_flat_kernel[(triton.cdiv(n, 4096),)](z, ref, n, ACT=_GELU_TANH, BLOCK=4096, num_warps=8)
    line = [f"d={d}:"]
    for block, warps in ((1024, 4), (4096, 8)):
        for ev in (False, True):
            for cs in (False, True):
                out.fill_(float("nan"))
                f = partial(
                    flat_hint[(triton.cdiv(n, block),)],
                    z,
                    out,
                    n,
                    ACT=_GELU_TANH,
                    BLOCK=block,
                    EVICT=ev,
                    CS=cs,
                    num_warps=warps,
                )
                f()
                assert torch.equal(out, ref)
                gb = nbytes / time_gpu(f).ms / 1e6
                line.append(f"b{block}/w{warps}/ev{int(ev)}/cs{int(cs)} {100 * gb / COPY:.1f}%")
    print(" ".join(line), flush=True)
