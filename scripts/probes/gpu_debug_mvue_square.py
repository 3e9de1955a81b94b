"""GPU debug (device tool): where the fused MVUE pack and MVUE-then-pack disagree (seen at
8192x8192, x column-major, in scripts/probes/gpu_probe_pack_kernels.py).
    usage: PYTHONPATH=. python3 scripts/probes/gpu_debug_mvue_square.py"""

from __future__ import annotations

import torch

from kernels.ops.cslt_pack import cslt_keep_mask_reference, cslt_pack, cslt_pack_mvue_t, cslt_unpack_reference
from kernels.ops.mvue import mvue24_nocheck, mvue24_uniforms

DEV = torch.device("cuda")


def case(t: int, n: int, layout: str, seed: int, data_seed: int) -> None:
    g = torch.Generator(device=DEV).manual_seed(data_seed)
    x = torch.randn(t, n, device=DEV, generator=g).to(torch.bfloat16)
    if layout == "col":
        x = x.t().contiguous().t()
    xt = x.t().contiguous()
    keep = torch.empty(n, t, dtype=torch.bool, device=DEV)
    gm = mvue24_nocheck(xt, -1, seed_tensor=torch.tensor([seed], device=DEV), mask_out=keep)
    gm2 = mvue24_nocheck(xt, -1, seed_tensor=torch.tensor([seed], device=DEV))
    ref = cslt_pack(gm, keep, check=False)
    ours = cslt_pack_mvue_t(x, torch.tensor([seed], device=DEV))
    ours2 = cslt_pack_mvue_t(x, torch.tensor([seed], device=DEV))
    kt = cslt_keep_mask_reference(ours, n, t)
    ut = cslt_unpack_reference(ours, n, t)
    bad = (kt != keep).reshape(n, t // 4, 4).any(-1)
    badv = (ut.view(torch.int16) != gm.view(torch.int16)).reshape(n, t // 4, 4).any(-1)
    print(
        f"[{t}x{n}] {layout} seed {seed} data {data_seed}: mvue deterministic {torch.equal(gm, gm2)}, "
        f"fused deterministic {torch.equal(ours.view(torch.int16), ours2.view(torch.int16))}, "
        f"packed equal {torch.equal(ours.view(torch.int16), ref.view(torch.int16))}, groups with other keep "
        f"{int(bad.sum())}, groups with other values {int(badv.sum())} of {n * t // 4}",
        flush=True,
    )
    idx = (bad | badv).nonzero()[:6].tolist()
    if idx:
        u = mvue24_uniforms(seed, n * t // 4, DEV)
        for r, j in idx:
            gi = r * (t // 4) + j
            print(
                f"  row {r} group {j}: x {xt[r, 4 * j : 4 * j + 4].float().tolist()} u {u[gi].item():.9f} "
                f"mvue {gm[r, 4 * j : 4 * j + 4].float().tolist()} fused {ut[r, 4 * j : 4 * j + 4].float().tolist()}",
                flush=True,
            )


def main() -> None:
    case(8192, 8192, "col", 7, 16384)
    case(8192, 8192, "col", 7, 1)
    case(8192, 8192, "row", 7, 16384)
    case(4096, 4096, "col", 7, 8192)
    case(8192, 16384, "col", 7, 24576)
    case(1024, 768, "col", 7, 5)


if __name__ == "__main__":
    main()
