"""Probe (not a suite): what a regenerating training step costs beyond its masks, before and after
the trainer keeps its masks in two flat buffers (issue 20, figure3's training step).

At 0988606 (H200) a figure3 training step that regenerated its TBS(8) masks cost about 18 ms more
than a step without regeneration plus the masks, for every method. Two suspects: FAST's mask
function called ``FlexMasker()`` with its check (a host sync at every regeneration, which the
baselines' maskers do not make), and the trainer's flip count (a compare and a sum a mask: 336
launches for 168 linears). This trains MAP-NEO 460M as figure3 does (TBS(8) masks, FAST) and times,
in alternating rounds in one process (``time_training_steps``, CUDA events per step):
- ``before``: the trainer as it was (it keeps the returned masks; the flip count a mask), figure3's
  FAST mask function as it was (``masker()`` with its check, then ``copy_masks()``);
- ``no sync``: the same trainer, the masker called with ``check=False``;
- ``after``: ``MaskedTrainer`` and figure3's ``trainer_mask_fn`` as they are now;
- ``no regen``: the step alone (masks made once, re-applied after every step).
Flip counts of ``before`` and ``after`` are compared on the same weights. ``--method torch`` or
``vegeta``: the baseline's compiled masker under the trainer before and after (its mask function
did not change), to see whether the trainer moved the baselines' training-step masks.

    python3 scripts/probes/gpu_probe_regen_overhead.py                         # one GPU
    python3 scripts/probes/gpu_probe_regen_overhead.py --method vegeta         # a compiled baseline
    TRITON_INTERPRET=1 python3 scripts/probes/gpu_probe_regen_overhead.py --smoke  # CPU, a small model
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.flex import TBS, FlexMasker  # noqa: E402
from repro.masked_training import MaskedTrainer, time_training_steps  # noqa: E402
from repro.models.llama import CONFIGS, LlamaConfig, LlamaModel, sparse_linears  # noqa: E402
from suites.figure3 import DENSITY, SEED, trainer_mask_fn  # noqa: E402


class TrainerBefore(MaskedTrainer):
    """``MaskedTrainer`` as it was at 0988606: keeps the returned masks themselves, counts the flips
    with a compare and a sum a mask."""

    def _keep(self, masks: list[torch.Tensor]) -> list[torch.Tensor]:
        return list(masks)

    def _count_flips(self, old: list[torch.Tensor], new: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([(a != b).sum() for a, b in zip(old, new, strict=True)]).sum()


def mask_fn_before(pattern, check: bool):
    """figure3's FAST mask function at 0988606: the masker's call (with or without its check), then
    one copy of its mask buffer."""
    held: dict[str, FlexMasker] = {}

    def fn(ws: list[torch.Tensor]) -> list[torch.Tensor]:
        if "m" not in held:
            held["m"] = FlexMasker([w.detach() for w in ws], pattern, DENSITY, SEED)
        held["m"](check=check)
        return held["m"].copy_masks()

    return fn


def main(smoke: bool, method: str) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    cuda = dev.type == "cuda"
    small = LlamaConfig(hidden=64, ffn=128, layers=2, heads=4, vocab=256, seq_len=32)
    cfg = small if smoke else CONFIGS["map-neo-460m"]
    batch, steps, rounds = (2, 2, 1) if smoke else (4, 10, 3)
    pattern = TBS(4) if smoke else TBS(8)  # figure3's; TBS(4)'s kernel is quicker to interpret
    torch.manual_seed(0)
    model = LlamaModel(cfg).to(dev)
    linears = sparse_linears(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq_len), device=dev)
    n = sum(lin.weight.numel() for lin in linears.values())
    gpu = torch.cuda.get_device_name() if cuda else "cpu"
    print(f"{len(linears)} weights, {n / 1e6:.1f}M values, {gpu}, torch {torch.__version__}; "
          f"{batch}x{cfg.seq_len} tokens, {pattern.name}, {steps} timed steps a round", flush=True)  # fmt: skip
    if method == "fast":
        variants = {
            "before": lambda: TrainerBefore(model, linears, mask_fn_before(pattern, True), 1, opt),
            "no sync": lambda: TrainerBefore(model, linears, mask_fn_before(pattern, False), 1, opt),
            "after": lambda: MaskedTrainer(model, linears, trainer_mask_fn(pattern, "fast", dev), 1, opt),
            "no regen": lambda: MaskedTrainer(model, linears, mask_fn_before(pattern, False), 10**9, opt),
        }
    else:  # a baseline's masker (compiled on a GPU), built once and shared: its mask function is unchanged
        shared = trainer_mask_fn(pattern, method, dev)
        print(f"method {method}: the same mask function under the trainer before and after", flush=True)
        variants = {
            "before": lambda: TrainerBefore(model, linears, shared, 1, opt),
            "after": lambda: MaskedTrainer(model, linears, shared, 1, opt),
            "no regen": lambda: MaskedTrainer(model, linears, shared, 10**9, opt),
        }
    seen: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for r in range(rounds):
        for name, make in variants.items():
            trainer = make()
            stats = time_training_steps(trainer, tokens, steps=steps, warmup=2)
            step, masks = stats["ms_per_step_mean"], stats["mask_ms_per_step"]
            seen[name].append((step, masks))
            print(f"round {r}: {name:9s} step {step:8.2f} ms  masks {masks:6.2f} ms  "
                  f"step - masks {step - masks:8.2f} ms", flush=True)  # fmt: skip
    for name, rows in seen.items():
        step = statistics.median(s for s, _ in rows)
        masks = statistics.median(m for _, m in rows)
        print(f"{name:9s} median over rounds: step {step:8.2f} ms, masks {masks:6.2f} ms, "
              f"step - masks {step - masks:8.2f} ms", flush=True)  # fmt: skip
    # the same flip counts on the same weights: two regenerations with each trainer, on w0 then w1
    weights = [lin.weight for lin in linears.values()]
    w0 = [w.detach().clone() for w in weights]
    gen = torch.Generator(device=dev).manual_seed(1)
    w1 = [w + 1e-3 * torch.randn(w.shape, device=dev, generator=gen) for w in w0]
    counts = []
    for make in (variants["before"], variants["after"]):
        trainer = make()
        for state in (w0, w1):
            with torch.no_grad():
                torch._foreach_copy_(weights, state)
            trainer.regenerate()
        counts.append(trainer.flip_rates)
    same = counts[0] == counts[1] and len(counts[0]) == 1
    print(f"flip rates before {counts[0]} after {counts[1]}: {'equal' if same else 'DIFFER'}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main("--smoke" in args, args[args.index("--method") + 1] if "--method" in args else "fast")
