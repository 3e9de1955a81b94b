"""GPU probe (device tool): the GEGLU / SwiGLU backward fused with MVUE + pack of dZ (the gated
fst FFN's fc output gradient) against the two passes it replaces (``kernels.ops.geglu``'s backward,
then ``cslt_pack_mvue_t``), tiles swept and bit-checked against the default launch; then a GEGLU
GPT-2 FFN (fc: d -> 2 * 4d, proj: 4d -> d) fwd + bwd: dense, fst with the fused backward, and fst
with the unfused one, checked against the masked dense twin first, 3 interleaved rounds.
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_fused_gated.py [d:N ...]   (default 2048:4 4096:4)"""

# ruff: noqa: B023 (each lambda is timed before the loop moves on)
from __future__ import annotations

import dataclasses
import statistics
import sys
from functools import partial

import torch

import kernels.ops._cslt_pack_triton as kt
import repro.models.gpt2 as gpt2_mod
from kernels.ops.cslt_pack import _alloc, cslt_gated_backward_mvue_pack_t, cslt_pack_mvue_t
from kernels.ops.geglu import empty_in_layout, geglu, launch_backward
from repro.timing import time_fn

DEV = torch.device("cuda")
BF = torch.bfloat16


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.int16).clone()


def _launch(z, g, dz, seed, out, bk, warps, split):
    kt.GATED_MVUE_TILE_ROW_MAJOR = kt.GATED_MVUE_TILE_COL_MAJOR = (bk, warps, split)
    kt.gated_bwd_mvue_pack_t_into(z, g, dz, 1, seed, out)


def kernel_sweep() -> None:
    default = (kt.GATED_MVUE_TILE_ROW_MAJOR, kt.GATED_MVUE_TILE_COL_MAJOR)
    print(f"defaults (columns, warps, split): row-major {default[0]}, column-major {default[1]}", flush=True)
    try:
        for t, r, layout in ((8192, 8192, "col"), (16384, 4096, "col"), (8192, 16384, "col"), (8192, 8192, "row")):
            _sweep(t, r, layout)
    finally:
        kt.GATED_MVUE_TILE_ROW_MAJOR, kt.GATED_MVUE_TILE_COL_MAJOR = default


def _sweep(t: int, r: int, layout: str) -> None:
    gen = torch.Generator(device=DEV).manual_seed(t + r)
    z = torch.randn(2 * r, t, device=DEV, generator=gen).to(BF).t()  # column-major [T, 2r]
    g = torch.randn(r, t, device=DEV, generator=gen).to(BF).t()
    if layout == "row":
        z, g = z.contiguous(), g.contiguous()
    col = layout == "col"
    seed = torch.tensor([3], dtype=torch.int64, device=DEV)
    dz, packed = cslt_gated_backward_mvue_pack_t(z, g, seed.fill_(3), "geglu", "tanh")
    sep_dz = empty_in_layout(z, 2 * r, col)
    launch_backward(z, g, sep_dz, col, 1)  # kernels.ops.geglu's backward (tanh GELU)
    same_pack = torch.equal(_bits(packed), _bits(cslt_pack_mvue_t(dz, seed.fill_(3))))
    same_dz = torch.equal(dz, sep_dz)
    nbytes = 2 * (2 * r * t + r * t + 2 * r * t) + 2 * r * t + 2 * r * t // 8  # z, g, dz; values, metadata
    sep = time_fn(lambda: cslt_pack_mvue_t(launch_backward(z, g, sep_dz, col, 1) or sep_dz, seed), DEV)
    bwd = time_fn(lambda: launch_backward(z, g, sep_dz, col, 1), DEV)
    print(
        f"T={t} r={r} {layout}-major: pack == cslt_pack_mvue_t(dz): {same_pack}; dz == geglu backward: {same_dz}; "
        f"separate {sep.ms:.3f} ms (geglu bwd alone {bwd.ms:.3f})",
        flush=True,
    )
    ref = _bits(packed)
    configs = [(bk, w, sp) for sp in (False, True) for bk, w in ((32, 4), (32, 8), (64, 4), (64, 8), (128, 8))]
    for bk, warps, split in configs:
        out = _alloc(2 * r, t, BF, DEV)
        dz2 = torch.full_like(z, float("nan"))
        try:
            _launch(z, g, dz2, seed.fill_(3), out, bk, warps, split)
        except Exception as e:  # noqa: BLE001 (a config that does not compile)
            print(f"   BK={bk} warps={warps} split={split}: {type(e).__name__}", flush=True)
            continue
        ok = torch.equal(_bits(out)[: ref.numel()], ref) and torch.equal(dz2, dz)
        tm = time_fn(lambda: _launch(z, g, dz2, seed, out, bk, warps, split), DEV)
        print(
            f"   BK={bk:3d} warps={warps} split={split:d}: {'ok ' if ok else 'BAD'} {tm.ms:.3f} ms "
            f"{nbytes / tm.ms / 1e6:6.0f} GB/s  ({sep.ms / tm.ms:.2f}x vs separate)",
            flush=True,
        )


def _unfused(z, producer, kind, approximate="none"):
    return geglu(z, approximate, check_finite=False)


def ffn(shapes, rounds: int = 3) -> None:
    from suites import figure6
    from suites._training_bench import check_against_twin, fwd_bwd
    from suites.figure6 import TOL

    n = figure6.FFN_N
    for d, batch in shapes:
        cfg = dataclasses.replace(figure6._cfg(d, n), ffn="geglu")
        gen = torch.Generator(device=DEV).manual_seed(1)
        x = torch.randn(batch, n, d, device=DEV, dtype=BF, generator=gen).requires_grad_(True)
        dy = torch.randn(batch, n, d, device=DEV, dtype=BF, generator=gen) * 0.1
        times: dict[str, list[float]] = {"dense": [], "fst fused": [], "fst unfused": []}
        real = gpt2_mod.fst_gated
        for rnd in range(rounds):
            for name in times:
                gpt2_mod.fst_gated = _unfused if name == "fst unfused" else real
                try:
                    torch.manual_seed(0)
                    mod = figure6._build("ffn", cfg, "dense" if name == "dense" else "fst", DEV)
                    if rnd == 0 and name != "dense":
                        e_out, e_dx = check_against_twin(mod, partial(figure6._build, "ffn", cfg, "dense", DEV), x, dy)
                        ok = e_out <= TOL["out"] and e_dx <= TOL["dx"]
                        tag = "ok  " if ok else "FAIL"
                        print(f"{tag} geglu ffn d={d} N={batch} {name}: out {e_out:.2e} dx {e_dx:.2e}", flush=True)
                    times[name].append(time_fn(fwd_bwd(mod, x, dy), DEV, graph=True).ms)
                    del mod
                finally:
                    gpt2_mod.fst_gated = real
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"geglu ffn d={d} n={n} N={batch}: dense {med['dense']:.3f} ms; "
            + "; ".join(
                f"{k} {med[k]:.3f} ms = {med['dense'] / med[k]:.3f}x "
                f"[{min(times['dense'][i] / v for i, v in enumerate(times[k])):.3f}-"
                f"{max(times['dense'][i] / v for i, v in enumerate(times[k])):.3f}]"
                for k in ("fst fused", "fst unfused")
            ),
            flush=True,
        )


if __name__ == "__main__":
    shapes = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(2048, 4), (4096, 4)]
    kernel_sweep()
    ffn(shapes)
