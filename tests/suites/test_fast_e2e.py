"""FAST Fig. 3 end to end (repro.tp_step, suites.fast_figure3_e2e) on the CPU with gloo: the tensor-parallel
step equals the unsharded model's step (loss and every gradient) for dense training and a flex
pattern, at world 1 and 2; masks made on the shards with each method's distributed pivot equal
the single-process reference; the suite's smoke profile runs through the CLI."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from repro.models.llama import LlamaConfig, LlamaModel, sparse_linears

CFG = LlamaConfig(hidden=128, ffn=256, layers=2, heads=4, vocab=256, seq_len=16)
CASES = (("dense", None), ("fast", "TBS(4)"), ("torch", "TBS(8)"), ("vegeta", "Vegeta(4)"), ("srste", None))
EQUAL = (("dense", None), ("fast", "TBS(4)"))


def _worker(rank: int, world: int, tp: int, tmp: str) -> None:
    from repro.tp_step import TPTrainer, build_mesh, full_masks, gather_check_masks, parallelize_llama

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=world)
    try:
        device = torch.device("cpu")
        mesh = build_mesh(device, tp)
        dp = world // tp
        out: dict = {"check": {}, "equal": {}}
        for method, pattern in CASES:
            torch.manual_seed(0)
            model = parallelize_llama(LlamaModel(CFG), mesh)
            trainer = TPTrainer(model, mesh, method, pattern, every=1, autocast=False)
            out["check"][f"{method} {pattern}"] = gather_check_masks(trainer)
            if (method, pattern) not in EQUAL:
                continue
            tokens = torch.randint(0, CFG.vocab, (2 * dp, CFG.seq_len), generator=torch.Generator().manual_seed(1))
            mine = tokens.view(dp, 2, -1)[mesh.get_local_rank("dp")]
            if method != "dense":
                trainer.regenerate()
            loss = trainer.forward_backward(mine)
            losses = [torch.zeros(()) for _ in range(world)]
            dist.all_gather(losses, loss.float())
            grads = {
                n: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                for n, p in model.named_parameters()
            }
            masks = full_masks(trainer) if method != "dense" else None
            if rank == 0:  # the unsharded model, same weights, same (global) masks, whole batch
                torch.manual_seed(0)
                ref = LlamaModel(CFG)
                if masks is not None:
                    with torch.no_grad():
                        for lin, m in zip(sparse_linears(ref).values(), masks, strict=True):
                            lin.weight.mul_(m)
                ref_loss = ref.loss(tokens)
                ref_loss.backward()
                ref_grads = dict(ref.named_parameters())
                mean_loss = sum(float(x) for x in losses) / world
                worst = max(
                    float((grads[n] - p.grad).abs().max() / p.grad.abs().max().clamp(min=1e-12))
                    for n, p in ref_grads.items()
                )
                out["equal"][f"{method} {pattern}"] = {
                    "loss": mean_loss,
                    "ref_loss": float(ref_loss),
                    "grad_rel_err": worst,
                    "names_match": sorted(grads) == sorted(ref_grads),
                }
        if rank == 0:
            Path(tmp, "out.json").write_text(json.dumps(out))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _launch(world: int, tp: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="fast_e2e_") as tmp:
        mp.start_processes(_worker, args=(world, tp, tmp), nprocs=world, join=True, start_method="spawn")
        return json.loads(Path(tmp, "out.json").read_text())


def _assert_ok(out: dict) -> None:
    for case, bad in out["check"].items():
        assert bad == [], (case, bad)
    assert set(out["equal"]) == {f"{m} {p}" for m, p in EQUAL}
    for case, r in out["equal"].items():
        assert r["names_match"], case
        assert abs(r["loss"] - r["ref_loss"]) <= 1e-5 * abs(r["ref_loss"]), (case, r)
        assert r["grad_rel_err"] <= 1e-4, (case, r)


def test_tp_step_world1():
    _assert_ok(_launch(1, 1))


@pytest.mark.slow
def test_tp_step_world2_tensor_parallel():
    _assert_ok(_launch(2, 2))
