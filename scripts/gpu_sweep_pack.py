# ruff: noqa: E501
"""Sweep (not a suite): launch variants of the cslt_pack kernel for transposed views on the GPU:
coalesced load + permute (TRANS) or strided loads, and num_warps, for the fused MVUE pack of dH
[8192, 4d] and the weight pair of W [4d, d] (float32), d = 4096. Every variant's output is checked
bit-equal to the default path's (same seed) before it is timed."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels._cslt_pack_triton as kpt  # noqa: E402
from kernels.cslt_pack import cslt_pack_mvue_t, cslt_pack_pair  # noqa: E402
from kernels.transposable import transposable_mask  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

dev, bf = torch.device("cuda"), torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)
d = 4096
w = torch.randn(4 * d, d, device=dev, generator=g)
m = transposable_mask(w)
dh = torch.randn(8192, 4 * d, device=dev, dtype=bf, generator=g)
ref_mvue = cslt_pack_mvue_t(dh, torch.tensor([5], dtype=torch.int64, device=dev))
ref_pair = cslt_pack_pair(w, m, dtype=bf, check=False)
for trans in (False, True):
    for warps in (4, 8, 16):
        kpt.MVUE_TRANS, kpt.WARPS["mvue"] = trans, warps
        out = cslt_pack_mvue_t(dh, torch.tensor([5], dtype=torch.int64, device=dev))
        same = torch.equal(out, ref_mvue)
        seed = torch.tensor([5], dtype=torch.int64, device=dev)
        t = time_gpu(partial(cslt_pack_mvue_t, dh, seed))
        print(
            f"mvue pack trans={trans} warps={warps}: equal {same}, {t.ms:.4f} ms, {dh.numel() * 3.125 / t.ms / 1e6:.0f} GB/s",
            flush=True,
        )
        kpt.TRANS_LOADS, kpt.WARPS["trans" if trans else "plain"] = trans, warps
        out = cslt_pack_pair(w, m, dtype=bf, check=False)
        same = torch.equal(out[0], ref_pair[0]) and torch.equal(out[1], ref_pair[1])
        t = time_gpu(partial(cslt_pack_pair, w, m, dtype=bf, check=False))
        print(
            f"weight pair trans={trans} warps={warps}: equal {same}, {t.ms:.4f} ms, {w.numel() * 7.25 / t.ms / 1e6:.0f} GB/s",
            flush=True,
        )
        kpt.WARPS.update({"plain": 4, "trans": 4})
