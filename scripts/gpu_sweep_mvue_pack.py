"""GPU sweep (device tool): num_warps of the fused MVUE pack and of the weight pair pack, each
variant checked bit for bit against the default before its time counts.
    usage: python3 scripts/gpu_sweep_mvue_pack.py"""

from __future__ import annotations

import torch

import kernels._cslt_pack_triton as kt
from kernels.cslt_pack import cslt_pack_mvue_t, cslt_pack_pair
from kernels.transposable import transposable_mask
from repro.timing import time_fn


def main() -> None:
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    t, d = 8192, 2048
    f = 4 * d
    dh_col = torch.randn(f, t, device=dev, generator=g).to(torch.bfloat16).t()  # [T, f] column-major
    dy = torch.randn(t, d, device=dev, generator=g).to(torch.bfloat16)
    w = torch.randn(f, d, device=dev, generator=g)
    m = transposable_mask(w)
    seed = torch.tensor([7], dtype=torch.int64, device=dev)
    # bytes moved: read 2 B (bf16) or 4 + 1 B (fp32 + mask) per element; write 1.125 B per packing
    cases = {
        "mvue dH col-major [8192x8192]": (lambda: cslt_pack_mvue_t(dh_col, seed.clone()), t * f * 25 // 8),
        "mvue dY row-major [8192x2048]": (lambda: cslt_pack_mvue_t(dy, seed.clone()), t * d * 25 // 8),
        "pair W fp32 [8192x2048]": (
            lambda: cslt_pack_pair(w, m, dtype=torch.bfloat16, check=False),
            f * d * 29 // 4,
        ),
    }
    for name, (fn, nbytes) in cases.items():
        kt.NUM_WARPS = 4
        ref = fn()
        ref = [r.clone() for r in ref] if isinstance(ref, tuple) else [ref.clone()]
        for nw in (2, 4, 8, 16):
            kt.NUM_WARPS = nw
            out = fn()
            out = list(out) if isinstance(out, tuple) else [out]
            same = all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(out, ref, strict=True))
            ms = time_fn(fn, dev, graph=False).ms if same else float("nan")
            print(f"{name:34s} warps={nw:2d} same={same} {ms:.4f} ms {nbytes / ms / 1e6:7.0f} GB/s", flush=True)
    kt.NUM_WARPS = 4


if __name__ == "__main__":
    main()
