"""Probe (not a suite): the trainer's mask re-application, a ``mul_`` a weight against one
``torch._foreach_mul_`` (ef68a52), and the training step around it.

figure3's training-step rows at 0988606 (H200, means over 20 steps, 2 regenerations at every = 10)
ran 4-5% slower than at 491bf07 for every method at every = 10, where ef68a52 had changed the
per-step re-application. This times, in one process on MAP-NEO 460M's 168 float32 weights with bool masks:
- the two forms alone (host time of a call, CUDA events; and CUDA-graph replay, device only);
- ``MaskedTrainer`` steps (every = 10, a cheap per-tensor mask function) with each form of
  ``apply_masks`` and with none, in alternating rounds (``time_training_steps``' median: a step without
  regeneration).

    python3 scripts/probes/gpu_probe_apply_masks.py            # one GPU
    python3 scripts/probes/gpu_probe_apply_masks.py --smoke    # CPU, a small model
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from repro.masked_training import MaskedTrainer, time_training_steps  # noqa: E402
from repro.models.llama import CONFIGS, LlamaConfig, LlamaModel, sparse_linears  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_probe_train_step_masks import host_and_device_ms  # noqa: E402


def main(smoke: bool) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    cuda = dev.type == "cuda"
    cfg = (
        LlamaConfig(hidden=64, ffn=128, layers=2, heads=4, vocab=256, seq_len=32) if smoke else CONFIGS["map-neo-460m"]
    )
    batch, steps, rounds, reps = (2, 10, 1, 2) if smoke else (4, 20, 3, 20)
    torch.manual_seed(0)
    model = LlamaModel(cfg).to(dev)
    linears = sparse_linears(model)
    weights = [lin.weight for lin in linears.values()]
    masks = [torch.rand_like(w) < 0.5 for w in weights]
    n = sum(w.numel() for w in weights)
    gpu = torch.cuda.get_device_name() if cuda else "cpu"
    print(
        f"{len(weights)} weights, {n / 1e6:.1f}M float32 values, bool masks; {gpu}; torch {torch.__version__}",
        flush=True,
    )

    @torch.no_grad()
    def loop() -> None:
        for w, m in zip(weights, masks, strict=True):
            w.mul_(m)

    @torch.no_grad()
    def foreach() -> None:
        torch._foreach_mul_(weights, masks)

    forms = {"mul_ a weight": loop, "one _foreach_mul_": foreach}
    for name, fn in forms.items():
        fn()
        host, event = host_and_device_ms(fn, cuda, reps)
        line = f"{name:20s} host {host:7.2f} ms   events {event:7.2f} ms"
        if cuda:
            t = time_gpu(fn, graph=True)
            line += f"   graph replay {t.ms:6.3f} ms ({t.timer})"
        print(line, flush=True)

    def mask_fn(ws: list[torch.Tensor]) -> list[torch.Tensor]:  # cheap: not what is measured
        return [w.abs() > 0.01 for w in ws]

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    trainer = MaskedTrainer(model, linears, mask_fn, 10, opt)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq_len), device=dev)
    foreach_apply = MaskedTrainer.apply_masks

    @torch.no_grad()
    def loop_apply(self: MaskedTrainer) -> None:
        if self.masks is not None:
            for w, m in zip(self._weights(), self.masks, strict=True):
                w.mul_(m)

    def no_apply(self: MaskedTrainer) -> None:  # the step without re-application (masks drift)
        return None

    variants = (("mul_ a weight", loop_apply), ("one _foreach_mul_", foreach_apply), ("no re-application", no_apply))
    medians: dict[str, list[float]] = {name: [] for name, _ in variants}
    for r in range(rounds):
        for name, apply in variants:
            trainer.apply_masks = apply.__get__(trainer)
            stats = time_training_steps(trainer, tokens, steps=steps, warmup=2)
            medians[name].append(stats["ms_per_step"])
            print(
                f"round {r}: training step (every 10, median) with {name:18s} {stats['ms_per_step']:8.2f} ms",
                flush=True,
            )
    for name, ms in medians.items():
        print(f"training step with {name:18s} median over rounds {statistics.median(ms):8.2f} ms", flush=True)


if __name__ == "__main__":
    main("--smoke" in sys.argv)
