"""GPU probe (device tool): the per-step packing kernels of the fst FFN at figure6 shapes, each
variant checked bit for bit against the reference path before its time counts.

* weight pair, every step: packing afresh (values + metadata, mask read, two launches) vs the
  values-only refresh (one coalesced read of W, positions from the pair's metadata), warps swept;
* fused MVUE + pack of dH^T (row-major operand) and dY^T (column-major operand), tile widths and
  warps swept, against MVUE of a transposed copy followed by packing (the unfused path).

GB/s counts the bytes each job must move at least (reads of its inputs, writes of its outputs).
Earlier outputs (with kernels since removed): results/tuning/h100_probe_pack_kernels_*.txt.
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_pack_kernels.py [pair] [mvue]"""

from __future__ import annotations

import sys

import torch

import kernels.ops._cslt_pack_triton as kt
from kernels.ops.cslt_pack import cslt_pack, cslt_pack_mvue_t, cslt_pack_pair, cslt_repack_pair_values
from kernels.ops.mvue import mvue24_nocheck
from kernels.ops.transposable import transposable_mask
from repro.timing import time_fn

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _bits(ts) -> list[torch.Tensor]:
    ts = ts if isinstance(ts, (tuple, list)) else [ts]
    return [t.reshape(-1).view(torch.int16).clone() for t in ts]


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _row(name: str, same: bool, ms: float, nbytes: int) -> None:
    print(f"{name:58s} same={same!s:5s} {ms:8.4f} ms {nbytes / ms / 1e6:7.0f} GB/s", flush=True)


def probe_pair(d: int) -> None:
    g = torch.Generator(device=DEV).manual_seed(d)
    f = 4 * d
    for r, c in ((f, d), (d, f)):
        w = torch.randn(r, c, device=DEV, generator=g)
        m = transposable_mask(w)
        pair = cslt_pack_pair(w, m, dtype=torch.bfloat16, check=False)
        w2 = torch.randn(r, c, device=DEV, generator=g)
        ref = _bits(cslt_pack_pair(w2, m, dtype=torch.bfloat16, check=False))
        fresh = time_fn(lambda: cslt_pack_pair(w2, m, dtype=torch.bfloat16, check=False), DEV, graph=False).ms  # noqa: B023
        _row(f"pair [{r}x{c}] packed afresh (mask read)", True, fresh, r * c * (4 + 1) + r * c * 9 // 4)
        for nw in (2, 4, 8):
            kt.PAIR_WARPS = nw
            for t in pair:
                t.reshape(-1)[: r * c // 2].view(torch.int16).fill_(0x7FC1)
            cslt_repack_pair_values(w2, *pair)
            same = _same(_bits(pair), ref)
            fn = lambda: cslt_repack_pair_values(w2, *pair)  # noqa: E731, B023
            ms = time_fn(fn, DEV, graph=False).ms if same else float("nan")
            _row(f"pair [{r}x{c}] values-only w{nw}", same, ms, r * c * 4 + r * c * 2 + r * c // 8)
    kt.PAIR_WARPS = 4


def probe_mvue(t: int, n: int, layout: str) -> None:
    g = torch.Generator(device=DEV).manual_seed(t + n)
    x = torch.randn(t, n, device=DEV, generator=g).to(torch.bfloat16)
    if layout == "col":
        x = x.t().contiguous().t()
    nbytes = t * n * 2 + t * n * 9 // 8

    def seed() -> torch.Tensor:
        return torch.tensor([7], dtype=torch.int64, device=DEV)

    def unfused() -> torch.Tensor:
        keep = torch.empty(n, t, dtype=torch.bool, device=DEV)
        return cslt_pack(mvue24_nocheck(x.t().contiguous(), -1, seed_tensor=seed(), mask_out=keep), keep, check=False)

    ref = _bits(unfused())
    _row(f"mvue [{t}x{n}] {layout}-major unfused", True, time_fn(unfused, DEV, graph=False).ms, nbytes)
    name = "MVUE_TILE_ROW_MAJOR" if layout == "col" else "MVUE_TILE_COL_MAJOR"  # x col-major: x^T row-major
    default = getattr(kt, name)
    for bk, nw in ((32, 4), (32, 8), (64, 4), (64, 8), (128, 4), (128, 8)):
        setattr(kt, name, (bk, nw))
        same = _same(_bits(cslt_pack_mvue_t(x, seed())), ref)
        s = seed()
        ms = time_fn(lambda: cslt_pack_mvue_t(x, s), DEV, graph=False).ms if same else float("nan")  # noqa: B023
        _row(f"mvue [{t}x{n}] {layout}-major tile {bk} w{nw}", same, ms, nbytes)
    setattr(kt, name, default)


def main(parts: list[str]) -> None:
    print(torch.cuda.get_device_name(), flush=True)
    if "pair" in parts:
        for d in (2048, 4096):
            probe_pair(d)
    if "mvue" in parts:
        for t, n, layout in ((8192, 8192, "col"), (8192, 2048, "row"), (8192, 16384, "col"), (8192, 4096, "row")):
            probe_mvue(t, n, layout)


if __name__ == "__main__":
    main(sys.argv[1:] or ["pair", "mvue"])
