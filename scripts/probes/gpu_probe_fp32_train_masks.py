"""Probe (not a suite): where FAST's 19.8 ms a step goes in figure3's float32 training step.

figure3's trainer asks ``FlexMasker`` for TBS(8,8) masks of a MAP-NEO 460M model's 168 float32
master weights (327M values) and clones them (``suites.figure3._held_mask_fn``). This times, on
the same weights, the masker's call (``check=False``, the trainer's; then with its checks), the
clone of its masks, and the same masker on bf16 copies of the weights; then a profile of one
call by kernel. CUDA-graph replays where a call can be captured (``repro.timing.time_gpu``).

    python3 scripts/probes/gpu_probe_fp32_train_masks.py          # one GPU
    python3 scripts/probes/gpu_probe_fp32_train_masks.py --smoke  # CPU, a small model
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.flex import TBS, FlexMasker  # noqa: E402
from repro.models.llama import CONFIGS, LlamaConfig, LlamaModel, sparse_linears  # noqa: E402
from repro.timing import time_gpu  # noqa: E402
from suites.figure3 import DENSITY, SEED  # noqa: E402


def main(smoke: bool) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    small = LlamaConfig(hidden=64, ffn=128, layers=2, heads=4, vocab=256, seq_len=32)
    cfg = small if smoke else CONFIGS["map-neo-460m"]
    torch.manual_seed(0)
    model = LlamaModel(cfg).to(dev)
    ws = [m.weight.detach() for m in sparse_linears(model).values()]
    n = sum(w.numel() for w in ws)
    gpu = "cpu" if smoke else torch.cuda.get_device_name()
    print(f"{len(ws)} weights, {n / 1e6:.1f}M values, {gpu}", flush=True)
    pattern = TBS(8)
    fp32 = FlexMasker(ws, pattern, DENSITY, SEED)
    bf16_ws = [w.to(torch.bfloat16) for w in ws]
    bf16 = FlexMasker(bf16_ws, pattern, DENSITY, SEED)
    a = [m.clone() for m in fp32(check=False)]
    b = [m.clone() for m in bf16(check=False)]
    same = sum(int((x == y).sum()) for x, y in zip(a, b, strict=True)) / n
    print(f"fp32 vs bf16 masks agree on {100 * same:.3f}% of entries (bf16 rounding moves ties)", flush=True)
    if smoke:
        return
    rows = [
        ("fp32 masker(check=False)", lambda: fp32(check=False), True),
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


if __name__ == "__main__":
    main("--smoke" in sys.argv)
