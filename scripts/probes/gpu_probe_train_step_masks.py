"""Probe (not a suite): FAST's mask time in figure3's float32 training step, taken apart.

figure3's training step (MAP-NEO 460M, TBS(8,8) masks every step) reports FAST's masks at
19.7 ms a step on an H200 at 491bf07, where the masker's call alone times 9.3 ms
(``gpu_probe_fp32_train_masks.py``). This trains the same model as figure3 does (its mask
function: one ``FlexMasker`` over the float32 master weights, masks cloned; ``MaskedTrainer``,
``time_training_steps``), then, on the trained weights:
- reads after each of a few more steps whether the float32 window pivot hit (its control words);
- times the masker's call (CUDA-graph replay; and with its check), the trainer's whole
  regeneration (events around ``MaskedTrainer.regenerate``, as the trainer times it), and a lean
  regeneration (one clone of the masker's mask buffer, ``torch._foreach_mul_``), with the host
  time of each.

    python3 scripts/probes/gpu_probe_train_step_masks.py          # one GPU
    TRITON_INTERPRET=1 python3 scripts/probes/gpu_probe_train_step_masks.py --smoke  # CPU, a small model
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import kernels.ops._pivot_f32_triton as pf  # noqa: E402
from kernels.ops._pivot_f32_triton import CTL_AT, HI, K_EFF, LO, MISSED, N_COMPACT  # noqa: E402
from kernels.ops.flex import TBS, FlexMasker  # noqa: E402
from repro.masked_training import MaskedTrainer, time_training_steps  # noqa: E402
from repro.models.llama import CONFIGS, LlamaConfig, LlamaModel, sparse_linears  # noqa: E402
from repro.timing import time_gpu  # noqa: E402
from suites.figure3 import DENSITY, SEED  # noqa: E402


def host_and_device_ms(fn, cuda: bool, reps: int = 10) -> tuple[float, float]:
    """Median host time of one call (synchronised before and after) and median event time."""
    host, dev = [], []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
        if cuda:
            e.record()
            torch.cuda.synchronize()
            dev.append(s.elapsed_time(e))
    return statistics.median(host), statistics.median(dev) if dev else float("nan")


def main(smoke: bool) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    cuda = dev.type == "cuda"
    small = LlamaConfig(hidden=64, ffn=128, layers=2, heads=4, vocab=256, seq_len=32)
    cfg = small if smoke else CONFIGS["map-neo-460m"]
    batch, steps, reps = (2, 2, 1) if smoke else (4, 10, 10)
    pattern = TBS(4) if smoke else TBS(8)  # figure3's; TBS(4)'s kernel is quicker to interpret
    if smoke:  # the float32 window pivot at the small model's size (under TRITON_INTERPRET=1)
        pf.F32_WINDOW_MIN_VALUES = 1 << 14
    torch.manual_seed(0)
    model = LlamaModel(cfg).to(dev)
    linears = sparse_linears(model)
    held: dict[str, FlexMasker] = {}

    def mask_fn(ws: list[torch.Tensor]) -> list[torch.Tensor]:  # as suites/figure3.py's for "fast"
        if "m" not in held:
            held["m"] = FlexMasker([w.detach() for w in ws], pattern, DENSITY, SEED)
        return [m.clone() for m in held["m"]()]

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    trainer = MaskedTrainer(model, linears, mask_fn, 1, opt)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq_len), device=dev)
    gpu = torch.cuda.get_device_name() if cuda else "cpu"
    n = sum(lin.weight.numel() for lin in linears.values())
    print(f"{len(linears)} weights, {n / 1e6:.1f}M values, {gpu}; {batch}x{cfg.seq_len} tokens", flush=True)
    stats = time_training_steps(trainer, tokens, steps=steps, warmup=2)
    masker = held["m"]
    print(
        f"training step, masks every step: {stats['ms_per_step_mean']:.2f} ms/step, "
        f"masks {stats['mask_ms_per_step']:.2f} ms/step (figure3's reading); float32 window pivot {masker._f32_window}",
        flush=True,
    )
    times = trainer.mask_times_ms[-steps:]
    print("  regeneration times (ms): " + " ".join(f"{t:.2f}" for t in times), flush=True)
    if masker._f32_window:
        for _ in range(2 if smoke else 4):
            trainer.step_async(tokens)
            ctl = masker.counts[CTL_AT:].tolist()
            zeros = sum(int((lin.weight == 0).sum()) for lin in linears.values())
            print(
                f"  step {trainer.step_index}: window keys {ctl[LO]}..{ctl[HI] - 1} "
                f"{'MISSED' if ctl[MISSED] else 'hit'}, {ctl[N_COMPACT]} nonzero values copied "
                f"({100 * ctl[N_COMPACT] / n:.2f}%), rank in it {ctl[K_EFF]}; exact zeros {zeros} "
                f"({100 * zeros / n:.2f}%), k {masker.k}",
                flush=True,
            )
        ws = [lin.weight.detach() for lin in linears.values()]
        min_values, pf.F32_WINDOW_MIN_VALUES = pf.F32_WINDOW_MIN_VALUES, 1 << 62
        radix = FlexMasker(ws, pattern, DENSITY, SEED)  # the four-pass radix pivot over every value
        pf.F32_WINDOW_MIN_VALUES = min_values
        a = [m.clone() for m in masker(check=False)]
        r = radix(check=False)
        same = all(torch.equal(x, y) for x, y in zip(a, r, strict=True)) and torch.equal(masker.state, radix.state)
        print(f"  trained weights: window pivot vs radix pivot, masks and state {'equal' if same else 'DIFFER'}")
        if cuda:
            for name, m in (("window", masker), ("radix", radix)):
                t = time_gpu(lambda m=m: m(check=False), graph=True)
                print(f"  masker(check=False) with the {name} pivot: {t.ms:.2f} ms ({t.timer})", flush=True)
    weights = [lin.weight for lin in linears.values()]

    @torch.no_grad()
    def lean() -> None:  # one clone of the mask buffer, one foreach multiply
        masker()
        buf = masker._mask_buffer.clone()
        off, masks = 0, []
        for w in weights:
            masks.append(buf[off : off + w.numel()].view(w.shape))
            off += -(-w.numel() // 16) * 16
        torch._foreach_mul_(weights, masks)

    rows = [
        ("masker(check=False)", lambda: masker(check=False)),
        ("masker() with its check", lambda: masker()),
        ("figure3 mask_fn (masker + clones)", lambda: mask_fn(weights)),
        ("trainer.regenerate() (as timed)", trainer.regenerate),
        ("lean: masker, one clone, foreach mul", lean),
    ]
    for name, fn in rows:
        fn()
        host, event = host_and_device_ms(fn, cuda, reps)
        print(f"{name:40s} host {host:8.2f} ms   events {event:8.2f} ms", flush=True)
    if cuda:
        t = time_gpu(lambda: masker(check=False), graph=True)
        print(f"{'masker(check=False), graph replay':40s} {t.ms:8.2f} ms ({t.timer})", flush=True)


if __name__ == "__main__":
    main("--smoke" in sys.argv)
