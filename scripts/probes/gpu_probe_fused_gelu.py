"""GPU probe (device tool): the GELU backward fused with MVUE + pack of dH (the fst FFN's dH),
against the two passes it replaces (torch's GELU backward, then ``cslt_pack_mvue_t``), at figure6
shapes; tile width and warps swept, each variant bit-checked against the default launch before
its time counts. Then figure6's FFN measurement (dense, fst, GEMM-level ceiling) at a few shapes.
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_fused_gelu.py [d:N ...]"""

# ruff: noqa: B023 (each lambda is timed before the loop moves on)
from __future__ import annotations

import sys

import torch

import kernels.ops._cslt_pack_triton as kt
from kernels.ops.cslt_pack import _alloc, cslt_gelu_backward_mvue_pack_t, cslt_pack_mvue_t
from repro.timing import time_fn

DEV = torch.device("cuda")
BF = torch.bfloat16


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.int16).clone()


def _launch(h, g, dh, seed, out, bk, warps):
    """The production launcher with the tile (columns, warps) swept for both layouts."""
    kt.ACT_MVUE_TILE_ROW_MAJOR = kt.ACT_MVUE_TILE_COL_MAJOR = (bk, warps)
    kt.act_bwd_mvue_pack_t_into(h, g, dh, 1, seed, out)


def kernel_sweep() -> None:
    default = (kt.ACT_MVUE_TILE_ROW_MAJOR, kt.ACT_MVUE_TILE_COL_MAJOR)
    try:
        _sweep()
    finally:
        kt.ACT_MVUE_TILE_ROW_MAJOR, kt.ACT_MVUE_TILE_COL_MAJOR = default


def _sweep() -> None:
    for t, f, layout in ((8192, 8192, "col"), (4096, 16384, "col"), (16384, 8192, "col"), (8192, 8192, "row")):
        gen = torch.Generator(device=DEV).manual_seed(t + f)
        h = torch.randn(f, t, device=DEV, generator=gen).to(BF).t()  # column-major [T, f]
        g = torch.randn(f, t, device=DEV, generator=gen).to(BF).t()
        if layout == "row":
            h, g = h.contiguous(), g.contiguous()
        seed = torch.tensor([3], dtype=torch.int64, device=DEV)
        dh, packed = cslt_gelu_backward_mvue_pack_t(h, g, seed.fill_(3), "tanh")
        sep_dh = torch.ops.aten.gelu_backward(g, h, approximate="tanh")
        same_pack = torch.equal(_bits(packed), _bits(cslt_pack_mvue_t(dh, seed.fill_(3))))
        dh_diff = (dh.float() - sep_dh.float()).abs().max().item()
        nbytes = 3 * 2 * t * f + t * f // 2 * 2 + t * f // 8  # read h, g; write dh; write values, metadata
        sep = time_fn(lambda: cslt_pack_mvue_t(torch.ops.aten.gelu_backward(g, h, approximate="tanh"), seed), DEV)
        bwd = time_fn(lambda: torch.ops.aten.gelu_backward(g, h, approximate="tanh"), DEV)
        print(
            f"T={t} f={f} {layout}-major: pack == cslt_pack_mvue_t(dh): {same_pack}; max|dh - torch| {dh_diff:.3g}; "
            f"separate {sep.ms:.3f} ms (torch GELU bwd alone {bwd.ms:.3f})",
            flush=True,
        )
        ref = _bits(packed)
        for bk, warps in ((32, 2), (32, 4), (32, 8), (64, 4), (64, 8), (128, 4), (128, 8)):
            out = _alloc(f, t, BF, DEV)
            dh2 = torch.empty_like(h)
            try:
                _launch(h, g, dh2, seed.fill_(3), out, bk, warps)
            except Exception as e:  # noqa: BLE001 (a config that does not compile)
                print(f"   BK={bk} warps={warps}: {type(e).__name__}", flush=True)
                continue
            ok = torch.equal(_bits(out)[: ref.numel()], ref) and torch.equal(dh2, dh)
            tm = time_fn(lambda: _launch(h, g, dh2, seed, out, bk, warps), DEV)  # noqa: B023
            print(
                f"   BK={bk:3d} warps={warps}: {'ok ' if ok else 'BAD'} {tm.ms:.3f} ms "
                f"{nbytes / tm.ms / 1e6:6.0f} GB/s  ({sep.ms / tm.ms:.2f}x vs separate)",
                flush=True,
            )


def ffn(shapes) -> None:
    sys.argv = sys.argv[:1]
    from scripts.probes.gpu_probe_ffn import _Ctx
    from suites import figure6

    ctx = _Ctx()
    n = figure6.FFN_N
    for d, batch in shapes:
        figure6._measure(ctx, "ffn", figure6._cfg(d, n), batch, n, ("fst",))
    figure6._breakdown(ctx, 2048, 4, n)


if __name__ == "__main__":
    shapes = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(2048, 4), (2048, 8), (4096, 2)]
    kernel_sweep()
    ffn(shapes)
