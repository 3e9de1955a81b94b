"""Probe (not a suite): where FAST's 19.8 ms a step goes in figure3's float32 training step.

figure3's trainer asks ``FlexMasker`` for TBS(8,8) masks of a MAP-NEO 460M model's 168 float32
master weights (327M values) and clones them (``suites.figure3._held_mask_fn``). This times, on
the same weights, the masker's call (``check=False``, the trainer's; then with its checks; with
the float32 window pivot and with the four-pass radix pivot it replaced), the clone of its masks,
and the same masker on bf16 copies of the weights; then the two float32 pivots alone (and the
window pivot's parts) in three regimes of the weights (init; row and column scales; half masked
to 0 then a small update, as the trainer's), checked bit for bit against each other, with the
window's hit and size, beside the bf16 window pivot; the compacting pass's launch settings swept
(init regime); then a profile of one call by kernel.
CUDA-graph replays where a call can be captured (``repro.timing.time_gpu``).

    python3 scripts/probes/gpu_probe_fp32_train_masks.py          # one GPU
    python3 scripts/probes/gpu_probe_fp32_train_masks.py --smoke  # CPU, a small model
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.flex import TBS, FlexMasker  # noqa: E402
from repro.models.llama import CONFIGS, LlamaConfig, LlamaModel, sparse_linears  # noqa: E402
from repro.timing import time_gpu  # noqa: E402
from suites.figure3 import DENSITY, SEED  # noqa: E402


def model_weights(smoke: bool, layers: int = 2) -> list[torch.Tensor]:
    """The float32 weights of MAP-NEO 460M's block linears at init (seed 0) on the GPU; ``smoke``:
    a small model's (``layers`` blocks) on the CPU."""
    dev = torch.device("cpu" if smoke else "cuda")
    small = LlamaConfig(hidden=64, ffn=128, layers=layers, heads=4, vocab=256, seq_len=32)
    torch.manual_seed(0)
    model = LlamaModel(small if smoke else CONFIGS["map-neo-460m"]).to(dev)
    return [m.weight.detach() for m in sparse_linears(model).values()]


def main(smoke: bool) -> None:
    ws = model_weights(smoke)
    n = sum(w.numel() for w in ws)
    gpu = "cpu" if smoke else torch.cuda.get_device_name()
    print(f"{len(ws)} weights, {n / 1e6:.1f}M values, {gpu}", flush=True)
    pattern = TBS(8)
    fp32 = FlexMasker(ws, pattern, DENSITY, SEED)
    print(f"fp32 masker: float32 window pivot {fp32._f32_window}", flush=True)
    import kernels.ops._pivot_f32_triton as pf

    min_values, pf.F32_WINDOW_MIN_VALUES = pf.F32_WINDOW_MIN_VALUES, 1 << 62
    fp32_radix = FlexMasker(ws, pattern, DENSITY, SEED)  # the four-pass radix pivot over every value
    pf.F32_WINDOW_MIN_VALUES = min_values
    bf16_ws = [w.to(torch.bfloat16) for w in ws]
    bf16 = FlexMasker(bf16_ws, pattern, DENSITY, SEED)
    a = [m.clone() for m in fp32(check=False)]
    b = [m.clone() for m in bf16(check=False)]
    same = sum(int((x == y).sum()) for x, y in zip(a, b, strict=True)) / n
    print(f"fp32 vs bf16 masks agree on {100 * same:.3f}% of entries (bf16 rounding moves ties)", flush=True)
    r = [m.clone() for m in fp32_radix(check=False)]
    equal = all(torch.equal(x, y) for x, y in zip(a, r, strict=True)) and torch.equal(fp32.state, fp32_radix.state)
    print(f"fp32 masks and state, window pivot vs radix pivot: {'equal' if equal else 'DIFFER'}", flush=True)
    pivots(ws, smoke)
    if smoke:
        return
    rows = [
        ("fp32 masker(check=False)", lambda: fp32(check=False), True),
        ("fp32 masker, radix pivot", lambda: fp32_radix(check=False), True),
        ("fp32 masker() with checks", lambda: fp32(), False),
        ("fp32 masker + clone (trainer)", lambda: [m.clone() for m in fp32(check=False)], True),
        ("clone of the masks alone", lambda: [m.clone() for m in a], True),
        ("bf16 masker(check=False)", lambda: bf16(check=False), True),
    ]
    for name, fn, graph in rows:
        t = time_gpu(fn, graph=graph)
        print(f"{name:32s} {t.ms:8.3f} ms  ({t.timer})", flush=True)
    from torch.profiler import ProfilerActivity, profile

    for name, m in (("fp32", fp32), ("bf16", bf16)):
        m(check=False)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                m(check=False)
            torch.cuda.synchronize()
        print(f"-- {name}: kernels over 3 calls")
        try:
            table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=14)
        except Exception:  # older names
            table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=14)
        print(table, flush=True)


def regimes(ws: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    """The weights at init; with row and column scales exp(0.5 N(0,1)) (trained layers' structure);
    then half of them masked to 0 and a 1e-4 N(0,1) update (the trainer's regime);
    ``scripts/probes/cpu_probe_f32_window_pivot.py``'s definitions."""
    g = torch.Generator(device=ws[0].device).manual_seed(1)
    scaled, stepped = [], []
    for w in ws:
        rows = torch.exp(0.5 * torch.randn(w.shape[0], 1, generator=g, device=w.device))
        cols = torch.exp(0.5 * torch.randn(1, w.shape[1], generator=g, device=w.device))
        scaled.append(w * rows * cols)
        keep = torch.rand(w.shape, generator=g, device=w.device) < 0.5
        stepped.append(scaled[-1] * keep + 1e-4 * torch.randn(w.shape, generator=g, device=w.device))
    return {"init": ws, "scaled": scaled, "masked+step": stepped}


def _run(launches: list[tuple]) -> None:
    for kernel, grid, args, warps in launches:
        kernel[grid](*args, num_warps=warps)


def pivots(ws: list[torch.Tensor], smoke: bool) -> None:
    """The float32 window pivot against the radix pivot (and the bf16 window pivot) per regime."""
    from kernels.ops import _pivot_f32_triton as pf
    from kernels.ops import _pivot_radix_triton as rt
    from kernels.ops import _pivot_triton as pt

    dev = ws[0].device
    read_ms = math.nan
    if not smoke:  # one read of every float32 value at the copy rate (a copy reads and writes them)
        src = torch.empty(sum(w.numel() for w in ws), device=dev)
        dst = torch.empty_like(src)
        read_ms = time_gpu(lambda: dst.copy_(src)).ms / 2
        print(f"one read of the float32 values at the copy rate: {read_ms:.3f} ms", flush=True)
        del src, dst
    for regime, rws in regimes(ws).items():
        flats = [w.reshape(-1) for w in rws]
        n = sum(f.numel() for f in flats)
        k = round(DENSITY * n)
        rc, rs = torch.zeros(rt.COUNTS_LEN, dtype=torch.int64, device=dev), torch.zeros(2, device=dev)
        radix = [x for p in rt.radix_hist_passes(flats, rc, k) for x in p] + [rt.radix_select_launch(rc, rs, k, True)]
        wc, ws_ = torch.zeros(pf.F32_WINDOW_COUNTS_LEN, dtype=torch.int64, device=dev), torch.zeros(2, device=dev)
        compact = torch.empty(pf.compact_capacity(n), device=dev)
        window = pf.f32_window_pivot_launches(flats, wc, compact, ws_, k)
        _run(radix)
        _run(window)
        same = torch.equal(rs.view(torch.int32), ws_.view(torch.int32)) and torch.equal(
            rc[rt.NONFINITE :], wc[rt.NONFINITE : rt.COUNTS_LEN]
        )
        ctl = wc[pf.CTL_AT :].tolist()
        hit = "missed" if ctl[pf.MISSED] else f"hit, window {100 * ctl[pf.N_COMPACT] / n:.2f}% of values"
        verdict = "equal" if same else "DIFFERS"
        print(f"-- {regime}: pivot {rs[0].item():.6g}, share {rs[1].item():.4f}; f32 window pivot {verdict} ({hit})")
        b16 = [f.to(torch.bfloat16) for f in flats]
        bc = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64, device=dev)
        bs = torch.zeros(2, device=dev)
        bwin = pt.window_pivot_launches([f.view(torch.int16) for f in b16], bc, bs, k, torch.bfloat16)
        _run(bwin)
        print(f"   bf16 window pivot (rotated sample) on bf16 copies: {'missed' if int(bc[pt.FLAG_AT]) else 'hit'}")
        if regime == "init":
            compaction_sweep(flats, k, rs, rc, read_ms, smoke)
        if smoke:
            continue
        groups = -(-len(flats) // pt.MAX_TENSORS)
        for name, launches in (
            ("radix pivot (4 passes)", radix),
            ("f32 window pivot", window),
            ("  its sample passes", window[: 2 * groups]),
            ("  sample + compaction + hit", window[: 3 * groups + 1]),
            ("bf16 window pivot", bwin),
        ):
            t = time_gpu(lambda launches=launches: _run(launches))
            print(f"   {name:30s} {t.ms:8.3f} ms  ({t.ms / read_ms:5.2f} float32 reads)", flush=True)


def compaction_sweep(
    flats: list[torch.Tensor], k: int, rs: torch.Tensor, rc: torch.Tensor, read_ms: float, smoke: bool
) -> None:
    """The compacting pass's launch settings (block, warps, programs an SM): the window pivot timed
    whole and up to its hit kernel, its result checked against the radix select's."""
    from kernels.ops import _pivot_f32_triton as pf
    from kernels.ops import _pivot_radix_triton as rt
    from kernels.ops import _pivot_triton as pt

    dev = flats[0].device
    sms = 4 if smoke else torch.cuda.get_device_properties(dev).multi_processor_count
    groups = -(-len(flats) // pt.MAX_TENSORS)
    n = sum(f.numel() for f in flats)
    print("   compacting pass settings (block, warps, programs an SM): window pivot / up to its hit kernel")
    for block, warps, per_sm in ((4096, 8, 2), (4096, 4, 4), (2048, 4, 8), (1024, 4, 8), (1024, 4, 16), (1024, 8, 16)):
        wc, st = torch.zeros(pf.F32_WINDOW_COUNTS_LEN, dtype=torch.int64, device=dev), torch.zeros(2, device=dev)
        compact = torch.empty(pf.compact_capacity(n), device=dev)
        kw = {"count_block": block, "count_warps": warps, "count_programs": per_sm * sms}
        launches = pf.f32_window_pivot_launches(flats, wc, compact, st, k, **kw)
        _run(launches)
        same = torch.equal(st.view(torch.int32), rs.view(torch.int32)) and torch.equal(
            wc[rt.NONFINITE : rt.COUNTS_LEN], rc[rt.NONFINITE :]
        )
        verdict = "equal" if same else "DIFFERS"
        if smoke:
            print(f"   {block:5d} {warps} {per_sm:3d}: {verdict}")
            continue
        whole = time_gpu(lambda launches=launches: _run(launches)).ms
        part = time_gpu(lambda launches=launches: _run(launches[: 3 * groups + 1])).ms
        reads = part / read_ms
        print(f"   {block:5d} {warps} {per_sm:3d}: {whole:7.3f} / {part:7.3f} ms ({reads:5.2f} reads), {verdict}")


if __name__ == "__main__":
    main("--smoke" in sys.argv)
