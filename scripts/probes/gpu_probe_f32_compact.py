"""Probe (not a suite): what bounds the float32 window pivot's compacting pass (issue 20).

figure3's training step spent about 2.5 ms a step in FlexMasker's float32 window pivot over the
MAP-NEO 460M model's 168 float32 weights, most of it in the compacting pass
(``kernels.ops._pivot_f32_triton._window_compact_kernel``: 21 launches of 8 weights, about 79 us
a launch, 25-29% of one read at the copy rate). This times that pass alone against variants that
each drop one of its parts, on the same weights and window (placed by the pivot's own sample
passes), with the pass's counters zeroed before every call:

* ``pass``: the kernel as FlexMasker runs it (since session 44 a block's three counts are one
  packed sum, no per-lane counters: 96 -> about 60 registers a thread);
* ``pass before``: the kernel's compaction alone (a block's keep count, one atomic a block on one
  counter, a block prefix sum, the scattered store), no count of the values above the window;
* ``atomic, no store``: the count and the atomic a block, no prefix sum, no store;
* ``count only``: no atomic a block, no store (one atomic a program at its end);
* ``64 counters``: the pass with its atomics spread over 64 counters (program pid takes counter
  pid % 64 and its own 1/64 of the buffer): same-address contention removed;
* ``read only``: the loads and a sum (the launch structure's floor).

Two regimes: the weights at init (the window holds about 1.5% of the values) and the trainer's
(half of every weight exact zeros, rank k at their edge: a window from key 0). The kept counts of
every variant are checked against the pass's. CUDA-graph replays, L2 flushed (``repro.timing``).

    python3 scripts/probes/gpu_probe_f32_compact.py            # one GPU
    TRITON_INTERPRET=1 python3 scripts/probes/gpu_probe_f32_compact.py --smoke   # CPU, small
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_probe_fp32_train_masks import model_weights  # noqa: E402

from kernels.ops import _pivot_f32_triton as pf  # noqa: E402
from kernels.ops._pivot_triton import MAX_TENSORS, block_slot, tensor_slots  # noqa: E402
from repro.timing import time_gpu  # noqa: E402
from suites.figure3 import DENSITY  # noqa: E402

SPREAD = 64
SETTINGS = ((1024, 4, 16), (512, 4, 16), (1024, 8, 8), (512, 2, 16), (2048, 8, 8))  # the pass's sweep


@triton.jit
def _variant_kernel(
    x0, x1, x2, x3, x4, x5, x6, x7,
    n0, n1, n2, n3, n4, n5, n6, n7,
    s1, s2, s3, s4, s5, s6, s7,
    ctl_ptr, cnt_ptr, out_ptr, seg, iters, BLOCK: tl.constexpr, MODE: tl.constexpr,
):  # fmt: skip
    # MODE 0: the pass before session 44 (one counter, ctl_ptr + 5; out_ptr holds seg values);
    # 1: atomic a block, no store; 2: count only; 3: 64 counters (cnt_ptr), segments of seg;
    # 4: read only (a sum a program, stored to cnt_ptr + pid so that the loads stay)
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    lo = tl.load(ctl_ptr + 7).to(tl.int32)
    hi = tl.load(ctl_ptr + 10).to(tl.int32)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    r = tl.arange(0, BLOCK)
    slot = pid % 64
    for i in range(iters):
        g = i * nprog + pid
        x, n, start = block_slot(
            g, x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7, s1, s2, s3, s4, s5, s6, s7
        )
        offs = (g - start) * BLOCK + r
        m = offs < n
        v = tl.load(x + offs, mask=m, other=0) & 0x7FFFFFFF
        if MODE == 4:
            acc += v
        else:
            key = v >> 16
            keep = m & (key >= lo) & (key < hi) & (v != 0)
            kk = keep.to(tl.int32)
            if MODE == 2:
                acc += kk
            else:
                total = tl.sum(kk, 0)
                if total > 0:
                    if MODE == 0:
                        base = tl.atomic_add(ctl_ptr + 5, total.to(tl.int64))
                        at = base + tl.cumsum(kk, 0) - 1
                        tl.store(out_ptr + at, v, mask=keep & (at < seg))
                    elif MODE == 1:
                        tl.atomic_add(ctl_ptr + 5, total.to(tl.int64))
                    else:
                        base = tl.atomic_add(cnt_ptr + slot, total.to(tl.int64))
                        at = base + tl.cumsum(kk, 0) - 1
                        tl.store(out_ptr + slot * seg + at, v, mask=keep & (at < seg))
    if MODE == 2:
        tl.atomic_add(ctl_ptr + 5, tl.sum(acc, 0).to(tl.int64))
    if MODE == 4:
        tl.store(cnt_ptr + 64 + pid, tl.sum(acc, 0).to(tl.int64))


def regimes(ws: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    """init; and the trainer's: half of every weight masked to exact zeros."""
    g = torch.Generator(device=ws[0].device).manual_seed(1)
    masked = [w * (torch.rand(w.shape, generator=g, device=w.device) < 0.5) for w in ws]
    return {"init": ws, "trainer (half exact zeros)": masked}


def variants(flats: list[torch.Tensor], ctl: torch.Tensor, buf: torch.Tensor, cnt: torch.Tensor, new: list) -> dict:
    """name -> launches over the groups of 8 weights (FlexMasker's settings); ``new``: the pass's own."""
    dev = flats[0].device
    programs = pf.compact_programs(dev)
    cap = buf.numel()
    seg = cap // SPREAD
    words = [f.view(torch.int32) for f in flats]
    groups = [words[i : i + MAX_TENSORS] for i in range(0, len(words), MAX_TENSORS)]
    names = ("pass", "pass before", "atomic, no store", "count only", "64 counters", "read only")
    out: dict[str, list[tuple]] = {name: [] for name in names}
    out["pass"] = new
    for g in groups:
        slots, progs, iters = tensor_slots(g, programs=programs, block=pf.COMPACT_BLOCK)
        modes = (("pass before", 0), ("atomic, no store", 1), ("count only", 2), ("64 counters", 3), ("read only", 4))
        for name, mode in modes:
            args = (*slots, ctl, cnt, buf, cap if mode == 0 else seg, iters, pf.COMPACT_BLOCK, mode)
            out[name].append((_variant_kernel, (progs,), args, pf.COMPACT_WARPS))
    return out


def main(smoke: bool) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    ws0 = model_weights(smoke, layers=3)
    gpu = "cpu" if smoke else torch.cuda.get_device_name()
    n = sum(w.numel() for w in ws0)
    print(f"{len(ws0)} float32 weights, {n / 1e6:.1f}M values, {gpu}", flush=True)
    read_ms = float("nan")
    if not smoke:
        src = torch.empty(n, device=dev)
        dst = torch.empty_like(src)
        read_ms = time_gpu(lambda: dst.copy_(src)).ms / 2
        print(f"one read of the values at the copy rate: {read_ms:.3f} ms", flush=True)
        del src, dst
    sms = 4 if smoke else torch.cuda.get_device_properties(dev).multi_processor_count
    for regime, ws in regimes(ws0).items():
        flats = [w.reshape(-1) for w in ws]
        k = round(DENSITY * n)
        groups = -(-len(flats) // MAX_TENSORS)
        ref_state = None
        for block, warps, per_sm in SETTINGS:
            kw = {"count_block": block, "count_warps": warps, "count_programs": per_sm * sms}
            counts = torch.zeros(pf.F32_WINDOW_COUNTS_LEN, dtype=torch.int64, device=dev)
            compact = torch.empty(pf.compact_capacity(n), device=dev)
            state = torch.zeros(2, device=dev)
            launches = pf.f32_window_pivot_launches(flats, counts, compact, state, k, **kw)
            _run(launches)
            missed = int(counts[pf.CTL_AT + pf.MISSED])
            if ref_state is None:
                ref_state = state.clone()
            same = torch.equal(state.view(torch.int32), ref_state.view(torch.int32))
            verdict = f"{'missed' if missed else 'hit'}, {'same pivot' if same else 'PIVOT DIFFERS'}"
            if smoke:
                print(f"   pivot at {block}/{warps}/{per_sm}: {verdict}", flush=True)
                continue
            whole = time_gpu(lambda launches=launches: _run(launches)).ms
            setting = f"{block:4d}/{warps}/{per_sm:2d} (block, warps, programs an SM)"
            print(f"   pivot at {setting}: {whole:6.3f} ms, {verdict}", flush=True)
        counts = torch.zeros(pf.F32_WINDOW_COUNTS_LEN, dtype=torch.int64, device=dev)
        compact = torch.empty(pf.compact_capacity(n), device=dev)
        state = torch.zeros(2, device=dev)
        launches = pf.f32_window_pivot_launches(flats, counts, compact, state, k)
        for kernel, grid, args, warps in launches[: 2 * groups]:  # the sample places the window
            kernel[grid](*args, num_warps=warps)
        ctl = counts[pf.CTL_AT :]
        lo, hi = int(ctl[pf.LO]), int(ctl[pf.HI])
        buf = compact[: pf.compact_capacity(n)].view(torch.int32)
        cnt = torch.zeros(64 + (1 << 16), dtype=torch.int64, device=dev)
        print(f"-- {regime}: window keys {lo}..{hi - 1}", flush=True)
        ref = None
        new = launches[2 * groups : 3 * groups]
        for name, ls in variants(flats, ctl, buf, cnt, new).items():

            def call(ls: list[tuple] = ls, ctl: torch.Tensor = ctl, cnt: torch.Tensor = cnt) -> None:
                ctl[pf.ABOVE : pf.NONFINITE_SEEN + 1].zero_()
                cnt[:SPREAD].zero_()
                for kernel, grid, args, warps in ls:
                    kernel[grid](*args, num_warps=warps)

            call()
            kept = int(cnt[:SPREAD].sum()) if name == "64 counters" else int(ctl[pf.COUNT])
            if name == "pass":
                ref = kept
                print(f"   window holds {kept} values ({100 * kept / n:.2f}%)", flush=True)
            check = "" if name == "read only" else ("  kept = pass's" if kept == ref else f"  kept {kept} != {ref}")
            if smoke:
                print(f"   {name:18s}{check}", flush=True)
                continue
            t = time_gpu(call).ms
            per = 1000 * t / len(ls)
            share = 100 * read_ms / t
            print(f"   {name:18s} {t:7.3f} ms ({per:5.1f} us a launch, {share:5.1f}% of a read){check}", flush=True)


def _run(launches: list[tuple]) -> None:
    for kernel, grid, args, warps in launches:
        kernel[grid](*args, num_warps=warps)


if __name__ == "__main__":
    main("--smoke" in sys.argv)
