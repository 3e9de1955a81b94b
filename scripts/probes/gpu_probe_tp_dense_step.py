"""GPU probe (device tool, under torchrun): why the dense tensor-parallel step of MAP-NEO 460M is
slower at world 2 and 4 than on one GPU (campaign 85d52d1: forward+backward 62 ms at world 1,
103-109 ms at world 2 and 4, same 4 x 2048 tokens, blocks compiled). Per world size: the dense
``repro.tp_step.TPTrainer`` step with eager and with compiled blocks, device time per part, peak
memory, and on rank 0 the profiler's kernels of one compiled step grouped as NCCL, GEMM and the
rest (time summed per group) and the top kernels, so the next step (sequence parallel, async TP,
fewer redistributions) can be chosen on numbers. With compiled blocks the step is timed twice:
with ``TPTrainer``'s optimizer (``ShardAdamW``: AdamW on the local pieces, since session 27) and
with torch's AdamW over the DTensor parameters (what it replaced: one optimizer per kind of
parameter, as before). Then (session 28) the compiled step once more with each column-wise
layer's input cast to bf16 before the TP plan's redistribution (a forward pre-hook on the
attention and the MLP):
the forward is the same (autocast casts that input to bf16 anyway), but each of the five
input-gradient all-reduces of a block runs in bf16 instead of float32.
    torchrun --standalone --nproc-per-node N scripts/probes/gpu_probe_tp_dense_step.py [MODEL]"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.getcwd())
from repro.models.llama import CONFIGS, LlamaModel  # noqa: E402
from repro.tp_step import (  # noqa: E402
    COLWISE,
    DTensorAdamW,
    TPTrainer,
    build_mesh,
    init_distributed,
    parallelize_llama,
)
from suites.fast_figure3_e2e import SMOKE  # noqa: E402

BATCH, STEPS = 4, 8


def _step_parts(trainer: TPTrainer, tokens: torch.Tensor) -> dict[str, float]:
    for _ in range(3):
        trainer.step(tokens)
    trainer.reset_times()
    for _ in range(STEPS):
        trainer.step(tokens)
    return trainer.times_ms()


def _to_bf16(module: torch.nn.Module, args: tuple) -> tuple:
    return (args[0].to(torch.bfloat16), *args[1:])


def cast_colwise_inputs(model: LlamaModel) -> None:
    """Cast the input of each block's attention and MLP (the modules that hold the column-wise
    layers) to bf16, so each column-wise layer's TP input hook sees bf16 and its input gradient is
    all-reduced in bf16. (A hook on the layers themselves, put before the TP hook with
    ``prepend=True``, broke dynamo's guards on the TP hook's closure: torch 2.11.)"""
    for block in model.layers:
        inner = getattr(block, "_orig_mod", block)
        for name in {c.split(".")[0] for c in COLWISE}:
            inner.get_submodule(name).register_forward_pre_hook(_to_bf16)


def _groups(prof) -> tuple[dict[str, float], list[tuple[str, float]]]:
    groups = {"nccl": 0.0, "gemm": 0.0, "other": 0.0}
    kernels = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0.0)) / 1e3
        if t <= 0 or e.key.startswith(("ProfilerStep", "aten::", "cuda", "Torch-Compiled", "CompiledFunction")):
            continue
        name = e.key.lower()
        gemm = "gemm" in name or "sm90" in name or "cutlass" in name
        kind = "nccl" if "nccl" in name else "gemm" if gemm else "other"
        groups[kind] += t
        kernels.append((e.key[:90], t))
    return groups, sorted(kernels, key=lambda kv: -kv[1])[:15]


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "map-neo-460m"
    cuda = torch.cuda.is_available()  # the CPU (gloo, "smoke" model) only checks that the probe runs
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    init_distributed(device)
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = build_mesh(device)
    cfg = SMOKE if name == "smoke" else CONFIGS[name]
    tokens = torch.randint(0, cfg.vocab, (BATCH, cfg.seq_len), generator=torch.Generator().manual_seed(1)).to(device)
    for compiled, bf16_in in ((False, False), (True, False), (True, True)):
        if bf16_in and not cuda:  # no autocast on the CPU: a bf16 input would meet float32 weights
            continue
        torch.manual_seed(0)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        model = parallelize_llama(LlamaModel(cfg, device=device), mesh, compile_blocks=compiled and cuda)
        if bf16_in:
            cast_colwise_inputs(model)
        trainer = TPTrainer(model, mesh, "dense", None, 1)
        first = float(trainer.step(tokens))
        parts = _step_parts(trainer, tokens)
        peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
        label = ("compiled" if compiled else "eager   ") + (", bf16 column-wise inputs" if bf16_in else "")
        if rank == 0:
            print(
                f"{name} world {world} blocks {label}: first loss {first:.6f}, step {parts['step']:.1f} ms "
                + " ".join(f"{p} {parts[p]:.1f}" for p in ("fwd_bwd", "optimizer"))
                + f"  peak {peak:.1f} GiB",
                flush=True,
            )
        if compiled and cuda and not bf16_in:
            shard_adamw = trainer.optimizer
            trainer.optimizer = DTensorAdamW([p for p in model.parameters() if p.requires_grad], 1e-4, fused=True)
            parts = _step_parts(trainer, tokens)
            if rank == 0:
                print(
                    f"{name} world {world} blocks compiled, AdamW on the DTensors: step {parts['step']:.1f} ms "
                    + " ".join(f"{p} {parts[p]:.1f}" for p in ("fwd_bwd", "optimizer")),
                    flush=True,
                )
            trainer.optimizer = shard_adamw  # the profile below: the step as TPTrainer runs it
        if compiled:
            acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=acts) as prof:
                for _ in range(2):
                    trainer.step(tokens)
                if cuda:
                    torch.cuda.synchronize()
            if rank == 0:
                groups, top = _groups(prof)
                total = sum(groups.values())
                print(
                    "   device time of 2 steps by kernel group: "
                    + ", ".join(f"{k} {v:.1f} ms ({100 * v / max(total, 1e-9):.0f}%)" for k, v in groups.items()),
                    flush=True,
                )
                for k, v in top:
                    print(f"     {v:8.2f} ms  {k}", flush=True)
        del trainer, model
        if cuda:
            torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
