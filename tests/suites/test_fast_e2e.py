"""FAST Fig. 3 end to end (repro.tp_step, suites.fast_figure3_e2e) on the CPU with gloo: the
tensor-parallel step equals the unsharded model's step (loss and every gradient) for dense training
and a flex pattern, at world 1, 2 and 4 (tp 4, and tp 2 x dp 2 with FSDP2); masks made on the shards
with each method's distributed pivot equal the single-process reference; the suite's smoke profile
runs through the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
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
# FAST's fused kernels through the interpreter: only the methods that launch them (the baselines
# run the same plain-PyTorch code either way, tested by the other runs)
INTERPRETED = EQUAL
SMALL = LlamaConfig(hidden=64, ffn=128, layers=1, heads=2, vocab=256, seq_len=16)  # the interpreter is slow


def _worker(
    rank: int,
    world: int,
    tp: int,
    tmp: str,
    interpret: bool,
    cfg: LlamaConfig,
    compile_blocks: bool = False,
    cases: tuple = CASES,
) -> None:
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"  # FAST's fused kernels, or the reference
    from repro.tp_step import TPTrainer, build_mesh, check_masks, full_masks, gather_check_masks, parallelize_llama

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=world)
    try:
        device = torch.device("cpu")
        mesh = build_mesh(device, tp)
        dp = world // tp
        out: dict = {"check": {}, "equal": {}, "world": world}
        for method, pattern in cases:
            torch.manual_seed(0)
            model = parallelize_llama(LlamaModel(cfg), mesh, compile_blocks=compile_blocks)
            trainer = TPTrainer(model, mesh, method, pattern, every=1, autocast=False)
            out["check"][f"{method} {pattern}"] = gather_check_masks(trainer)
            out["check"][f"{method} {pattern} distributed"] = _failures_anywhere(check_masks(trainer))
            if (method, pattern) == ("fast", "TBS(4)"):
                out["planted"] = _planted(trainer, rank, world, gather_check_masks, check_masks)
            if (method, pattern) not in EQUAL:
                continue
            tokens = torch.randint(0, cfg.vocab, (2 * dp, cfg.seq_len), generator=torch.Generator().manual_seed(1))
            mine = tokens.view(dp, 2, -1)[mesh.get_local_rank("dp")]
            if method != "dense":
                trainer.regenerate()
            loss = trainer.forward_backward(mine)
            losses = [torch.zeros(()) for _ in range(world)]
            dist.all_gather(losses, loss.float())
            grads = {  # compiled blocks: the same parameters under "._orig_mod."
                n.replace("._orig_mod", ""): p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                for n, p in model.named_parameters()
            }
            masks = full_masks(trainer) if method != "dense" else None
            if rank == 0:  # the unsharded model, same weights, same (global) masks, whole batch
                torch.manual_seed(0)
                ref = LlamaModel(cfg)
                if masks is not None:
                    with torch.no_grad():
                        for lin, m in zip(sparse_linears(ref).values(), masks, strict=True):
                            lin.weight.mul_(m)
                ref_loss = ref.loss(tokens)
                ref_loss.backward()
                ref_grads = dict(ref.named_parameters())
                mean_loss = sum(float(x) for x in losses) / world
                worst = float(  # torch's max: a NaN in any parameter makes it NaN (Python's max can drop it)
                    torch.stack(
                        [
                            (grads[n] - p.grad).abs().max() / p.grad.abs().max().clamp(min=1e-12)
                            for n, p in ref_grads.items()
                        ]
                    ).max()
                )
                out["equal"][f"{method} {pattern}"] = {
                    "loss": mean_loss,
                    "ref_loss": float(ref_loss),
                    "grad_rel_err": worst,
                    "names_match": sorted(grads) == sorted(ref_grads),
                }
            if (method, pattern) == ("fast", "TBS(4)"):  # after the comparison: a step moves the weights
                out["aligned"] = _collectives_per_step(trainer, cfg)
        if rank == 0:
            Path(tmp, "out.json").write_text(json.dumps(out))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _collectives_per_step(trainer, cfg: LlamaConfig) -> int:
    """All-reduces of the 1-element alignment buffer in one step with a regeneration (the others'
    tensors are larger): one per timed part at world > 1, none in one process."""
    calls = []
    real = dist.all_reduce

    def counting(t, *a, **k):
        if t.numel() == 1 and t is trainer._align_buf:
            calls.append(1)
        return real(t, *a, **k)

    dist.all_reduce = counting
    try:
        trainer.step(torch.randint(0, cfg.vocab, (2, cfg.seq_len), generator=torch.Generator().manual_seed(2)))
    finally:
        dist.all_reduce = real
    return len(calls)


def _failures_anywhere(bad: list[str]) -> list[str]:
    """Every rank's failures of ``check_masks`` (each rank reports its own), on every rank."""
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, bad)
    return [b for part in every for b in part]


def _planted(trainer, rank: int, world: int, gathered, distributed) -> dict:
    """Both checks on a wrong mask (one tile flipped on the last rank) and on a pivot one float32
    step above the exact one (all ranks): each must fail."""
    masker = trainer.masker
    masks, pivot = masker.masks, masker.pivot

    def flipped(p, t):
        ms = [m.clone() for m in masks(p, t)]
        if rank == world - 1:
            ms[0][0, :4] = ~ms[0][0, :4]
        return ms

    def above():
        p, t = pivot()
        up = torch.nextafter(torch.tensor(float(p)), torch.tensor(math.inf))  # one float32 step
        return float(up), t

    out = {}
    for name, patch in (("mask", ("masks", flipped)), ("pivot", ("pivot", above))):
        setattr(masker, *patch)
        out[name] = {"gathered": gathered(trainer), "distributed": _failures_anywhere(distributed(trainer))}
        delattr(masker, patch[0])  # the instance attribute goes; the method is back
    return out


def _launch(
    world: int, tp: int, interpret: bool, cfg: LlamaConfig = CFG, compile_blocks: bool = False, cases: tuple = CASES
) -> dict:
    with tempfile.TemporaryDirectory(prefix="fast_e2e_") as tmp:
        args = (world, tp, tmp, interpret, cfg, compile_blocks, cases)
        mp.start_processes(_worker, args=args, nprocs=world, join=True, start_method="spawn")
        out = json.loads(Path(tmp, "out.json").read_text())
        out["cases"] = len(cases)
        return out


def _assert_ok(out: dict) -> None:
    assert len(out["check"]) == 2 * out["cases"]  # the gathered check and the distributed one
    for case, bad in out["check"].items():
        assert bad == [], (case, bad)
    for what, verdicts in out["planted"].items():  # a planted error fails both checks
        assert verdicts["gathered"] and verdicts["distributed"], (what, verdicts)
    # every timed part (pivot, mask, forward+backward, optimizer) ends on all ranks together
    assert out["aligned"] == (4 if out["world"] > 1 else 0), out["aligned"]
    assert set(out["equal"]) == {f"{m} {p}" for m, p in EQUAL}
    for case, r in out["equal"].items():
        assert r["names_match"], case
        assert abs(r["loss"] - r["ref_loss"]) <= 1e-5 * abs(r["ref_loss"]), (case, r)
        assert r["grad_rel_err"] <= 1e-4, (case, r)


def test_tp_step_world1():
    _assert_ok(_launch(1, 1, interpret=False))


@pytest.mark.slow
def test_tp_step_world1_fused_kernels_interpreted():
    _assert_ok(_launch(1, 1, interpret=True, cfg=SMALL, cases=INTERPRETED))  # FAST's Triton kernels vs the reference


def test_tp_step_world2_tensor_parallel():
    _assert_ok(_launch(2, 2, interpret=False))


@pytest.mark.slow
def test_tp_step_world2_compiled_blocks():
    """Blocks torch.compiled after the TP plan (as the suite runs them on a GPU): the same loss
    and gradients as the unsharded eager model, the same masks."""
    _assert_ok(_launch(2, 2, interpret=False, compile_blocks=True))
    _assert_ok(_launch(4, 2, interpret=False, compile_blocks=True))  # FSDP2 over the compiled blocks


def test_tp_step_world4_tensor_and_data_parallel():
    """tp 2 x dp 2: FSDP2 shards over dp too, so the pivot group is the whole world of 4."""
    _assert_ok(_launch(4, 2, interpret=False))


@pytest.mark.slow
def test_tp_step_world4_tensor_parallel():
    """tp 4 (twice the width, so that every rank's pieces keep Vegeta(4)'s 64-wide tiles)."""
    wide = LlamaConfig(hidden=256, ffn=512, layers=2, heads=8, vocab=256, seq_len=16)
    _assert_ok(_launch(4, 4, interpret=False, cfg=wide))


def _step_worker(rank: int, world: int, tp: int, tmp: str) -> None:
    """Two dense training steps of the sharded model (``TPTrainer.step``: AdamW on the local pieces)
    against the same steps with torch's AdamW over the DTensor parameters (the optimizer it
    replaces) and against two AdamW steps of the unsharded model on the whole batch."""
    from repro.tp_step import DTensorAdamW, TPTrainer, build_mesh, parallelize_llama

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=world)
    try:
        mesh = build_mesh(torch.device("cpu"), tp)
        dp = world // tp
        gen = [torch.Generator().manual_seed(s) for s in (1, 2)]
        batches = [torch.randint(0, CFG.vocab, (2 * dp, CFG.seq_len), generator=g) for g in gen]
        got = []
        for dtensor_adamw in (False, True):
            torch.manual_seed(0)
            model = parallelize_llama(LlamaModel(CFG), mesh)
            trainer = TPTrainer(model, mesh, "dense", None, every=1, autocast=False, lr=1e-3)
            if dtensor_adamw:
                trainer.optimizer = DTensorAdamW(list(model.parameters()), lr=1e-3, fused=False)
            for tokens in batches:
                trainer.step(tokens.view(dp, 2, -1)[mesh.get_local_rank("dp")])
            full = {n: p.full_tensor() if hasattr(p, "full_tensor") else p for n, p in model.named_parameters()}
            got.append({n: t.detach() for n, t in full.items()})
        if rank == 0:
            torch.manual_seed(0)
            ref = LlamaModel(CFG)
            before = {n: p.detach().clone() for n, p in ref.named_parameters()}
            opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, foreach=True)
            for tokens in batches:
                ref.loss(tokens).backward()
                opt.step()
                opt.zero_grad()
            after = {n: p.detach() for n, p in ref.named_parameters()}
            rel = float(  # torch's max and min below: NaN propagates (Python's drop it unless it comes first)
                torch.stack(
                    [
                        (got[0][n] - after[n]).abs().max() / (after[n] - before[n]).abs().max().clamp(min=1e-12)
                        for n in after
                    ]
                ).max()
            )
            out = {
                "names": sorted(got[0]) == sorted(after),
                "same_as_dtensor_adamw": all(torch.equal(got[0][n], got[1][n]) for n in got[0]),
                "moved": float(torch.stack([(after[n] - before[n]).abs().max() for n in after]).min()),
                "rel_to_unsharded": rel,
            }
            Path(tmp, "out.json").write_text(json.dumps(out))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(("world", "tp"), [(2, 2), (4, 2)], ids=["tp2", "tp2-dp2"])
def test_tp_optimizer_on_local_pieces_equals_adamw_on_dtensors(world, tp):
    """The optimizer runs on each rank's local pieces (no DTensor dispatch): after two steps every
    parameter equals, bit for bit, what torch's AdamW over the DTensor parameters gives, with
    tensor parallelism alone and with FSDP2 over dp; and both stay near two AdamW steps of the
    unsharded model (within 3% of the largest update: Adam's first steps divide by |g|, so a
    gradient near 0 that differs in its last bits between the sharded and the unsharded sums moves
    its weight differently)."""
    with tempfile.TemporaryDirectory(prefix="fast_e2e_step_") as tmp:
        mp.start_processes(_step_worker, args=(world, tp, tmp), nprocs=world, join=True, start_method="spawn")
        out = json.loads(Path(tmp, "out.json").read_text())
    assert out["names"] and out["moved"] > 0, out
    assert out["same_as_dtensor_adamw"], out
    assert out["rel_to_unsharded"] <= 0.03, out


def test_smoke_profile_through_the_cli(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    env.pop("TRITON_INTERPRET", None)  # the CLI decides per suite, as for a user
    cmd = [sys.executable, "-m", "repro", "run", "fast_figure3_e2e", "--profile", "smoke"]
    cmd += ["--device", "cpu", "--results-dir", str(tmp_path), "--no-figure"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from repro.results import read_results
    from suites import fast_figure3_e2e as suite

    df = read_results(tmp_path / "cpu" / "fast_figure3_e2e.csv")
    checks = df[df["metric"] == "mask_check"]
    assert len(checks) == 1 + len(suite.FLEX_METHODS) * len(suite.FLEX_PATTERNS)  # SR-STE, flex pattern x method
    steps = df[df["metric"] == "step_ms"]
    assert set(steps["method"]) == {"dense", "srste", *suite.FLEX_METHODS} and (steps["value"] > 0).all()
    table = suite.compare(df)
    flex = table[table["pattern"].isin(suite.FLEX_PATTERNS)]
    assert flex["fast_radix_vs_torch"].notna().all() and (flex["fast_radix_pivot_ms"] >= 0).all()
    paper = table[table["pattern"].str.startswith("paper")]
    assert len(paper) == 1 and paper["comparable"].iloc[0].startswith("not comparable: model smoke")
    assert suite.verdict(df).status == "not comparable"


def test_layers_that_fit_and_reasons():
    from suites import fast_figure3_e2e as suite

    cfg = suite.CONFIGS["map-neo-7b"]
    one = suite.layers_that_fit(cfg, 80 * 2**30, 1, 1, 2048)
    assert 1 <= one < cfg.layers
    assert suite.layers_that_fit(cfg, 141 * 2**30, 8, 1, 2048) == cfg.layers
    # campaign 85d52d1: 17 blocks at world 4 on an H100 (79.2 GiB) ran out of memory in the
    # baselines' gathered top-k pivot; the memory model now counts its buffers
    h100 = int(79.18 * 2**30)
    assert suite.layers_that_fit(cfg, h100, 4, 1, 2048) < 17
    assert [suite.layers_that_fit(cfg, h100, w, 1, 2048) for w in (1, 2, 4)] == sorted(
        suite.layers_that_fit(cfg, h100, w, 1, 2048) for w in (1, 2, 4)
    )  # more ranks, smaller shards: never fewer blocks
    full = {"world_size": 8.0, "layers": 28.0, "paper_layers": 28.0}
    assert suite.not_comparable_reason("map-neo-7b", full) == ""
    assert "cut to 6 of 28" in suite.not_comparable_reason("map-neo-7b-cut6of28", {**full, "layers": 6.0})
    assert "world size 1" in suite.not_comparable_reason("map-neo-7b", {**full, "world_size": 1.0})


def test_rows_of_several_world_sizes_stay_apart_and_scale_per_block():
    """Merged rows of launches at world 1 and 4 (the 7B cut keeps more blocks at 4): the compare
    table keeps both, and the scaling rows divide by blocks before comparing with world 1."""
    import pandas as pd

    from suites import fast_figure3_e2e as suite

    rows = []
    for world, layers, mask, pivot in ((1, 4, 8.0, 2.0), (4, 12, 6.0, 3.0)):
        label = suite.model_label("map-neo-7b", layers, 30, world)
        assert suite.base_model(label) == "map-neo-7b"
        for metric, value in (("world_size", world), ("layers", layers), ("paper_layers", 30)):
            rows.append(dict(method="setup", shape=label, variant="", metric=metric, value=value))
        for method in ("torch", "fast", "srste"):
            for metric, value in (("mask_ms", mask), ("pivot_ms", pivot), ("step_ms", 100.0 * layers)):
                rows.append(dict(method=method, shape=label, variant="TBS(4) every=1", metric=metric, value=value))
    df = pd.DataFrame(rows)
    t = suite.scaling(df)
    fast = t[t["method"] == "fast"].set_index("world")
    assert list(fast.index) == [1, 4]
    assert fast.loc[4, "mask_ms_per_block"] == 0.5 and fast.loc[1, "mask_ms_per_block"] == 2.0
    assert fast.loc[4, "mask_speedup_vs_world1"] == 4.0 and fast.loc[4, "pivot_speedup_vs_world1"] == 2.0
    # SR-STE's 2:4 needs no pivot: its "pivot" part times only the ranks' alignment (campaign
    # be79020: 0.1 ms at world 2, a "0.03x pivot scaling"), so it has no pivot time to scale
    srste = t[t["method"] == "srste"].set_index("world")
    assert srste["pivot_ms_per_block"].isna().all() and srste["pivot_speedup_vs_world1"].isna().all()
    assert srste.loc[4, "mask_speedup_vs_world1"] == 4.0
    table = suite.compare(df)
    assert {"map-neo-7b-cut4of30 w1", "map-neo-7b-cut12of30 w4"} <= set(table["model"])
    assert table["pattern"].str.startswith("scaling: fast").sum() == 2
    assert suite.scaling(df[df["shape"].str.endswith("w1")]).empty  # one world size: no scaling rows
    # an interval run at world 1 only (the multi-GPU jobs run every=1): no scaling rows of its own
    w1 = df[df["shape"].str.endswith("w1") & (df["method"] != "setup")].assign(variant="TBS(4) every=10")
    assert set(suite.scaling(pd.concat([df, w1]))["variant"]) == {"TBS(4) every=1"}


def test_scaling_only_between_rows_of_one_commit():
    """Merged launches of different commits may time different code (session 30: world 4 at
    aa25838 with a faster pivot beside world 1 at 291c96d read as 30x pivot scaling): no speedup
    over world 1 across commits, a row that says why, and the summary says so."""
    import pandas as pd

    from suites import fast_figure3_e2e as suite

    rows = []
    for world, commit, pivot in (
        (1, "291c96d" + "0" * 33, 26.0),
        (2, "291c96d" + "0" * 33, 13.0),
        (4, "aa25838" + "1" * 33, 1.0),
    ):
        label = suite.model_label("map-neo-7b", 28, 28, world)
        for metric, value in (("world_size", world), ("layers", 28), ("paper_layers", 28)):
            rows.append(dict(method="setup", shape=label, variant="", metric=metric, value=value, git_commit=commit))
        for metric, value in (("mask_ms", 8.0 / world), ("pivot_ms", pivot), ("step_ms", 100.0)):
            rows.append(
                dict(
                    method="fast", shape=label, variant="TBS(4) every=1", metric=metric, value=value, git_commit=commit
                )
            )
    df = pd.DataFrame(rows)
    t = suite.scaling(df).set_index("world")
    assert t.loc[2, "pivot_speedup_vs_world1"] == 2.0 and t.loc[2, "mask_speedup_vs_world1"] == 2.0
    assert pd.isna(t.loc[4, "pivot_speedup_vs_world1"]) and pd.isna(t.loc[4, "mask_speedup_vs_world1"])
    assert t.loc[4, "comparable"] == "not comparable: world 1 measured at 291c96d, this at aa25838"
    assert "not comparable (world sizes measured at 291c96d/aa25838)" in suite.scaling_text(df)


def test_compiled_baseline_masks_allow_a_graph_per_piece_shape():
    """A training step masks every piece (several shapes) with each pattern: the compiled baseline
    is one static graph per (shape, pattern, method), beyond dynamo's default limit of 8 (this
    failed on the H100 with FailOnRecompileLimitHit at world 1 on MAP-NEO 460M)."""
    from kernels.ops.patterns import parse_pattern
    from repro.tp_step import ShardMasker

    weights = [torch.randn(64, 128), torch.randn(128, 64)]
    masker = ShardMasker(weights, "torch", parse_pattern("TBS(4)"), 0.5, None)
    seen = []

    def spy(*args):
        seen.append(torch._dynamo.config.recompile_limit)
        return masks_of_weight(*args)

    from kernels.ops.flex_torch import masks_of_weight

    masker.compiled, masker._mask_fn = True, spy
    masks = masker.masks(*masker.pivot())
    assert len(masks) == 2 and seen and min(seen) >= 1024
    assert torch._dynamo.config.recompile_limit < 1024  # raised only inside the call


def test_fast_pivot_radix_and_gaussian_agree_with_the_exact_select():
    """FAST's two pivot searches (the device radix select, the default; the paper's gaussian search)
    give the exact pivot and tie share of the pieces; an unknown search is refused."""
    from kernels.ops.flex import tie_share
    from kernels.ops.patterns import parse_pattern
    from kernels.ops.pivot import find_pivot
    from repro.tp_step import ShardMasker

    g = torch.Generator().manual_seed(5)
    weights = [torch.randn(64, 128, generator=g), (torch.randn(128, 64, generator=g) * 8).round()]  # ties
    for search in ("radix", "gaussian"):
        want = find_pivot(weights, 0.5, method="exact")
        want_tie = float(torch.tensor(tie_share(weights, want, 0.5), dtype=torch.float32))
        masker = ShardMasker(weights, "fast", parse_pattern("TBS(4)"), 0.5, None, fast_pivot=search)
        assert (masker._radix is not None) == (search == "radix")
        pivot, tie = masker.pivot()
        assert (pivot, float(torch.tensor(tie, dtype=torch.float32))) == (want, want_tie), search
        weights[0][0, 0] = float("nan")
        with pytest.raises(ValueError, match="NaN or Inf"):
            masker.pivot()
        weights[0][0, 0] = 0.0
    with pytest.raises(ValueError, match="fast_pivot"):
        ShardMasker(weights, "fast", parse_pattern("TBS(4)"), 0.5, None, fast_pivot="topk")


def test_masks_act_straight_through_on_dense_weights():
    """A step runs forward and backward at the masked weights and leaves the weights dense (the
    optimizer updates them with the gradient taken at the masked ones), so the next regeneration
    reads dense weights, as SR-STE and FAST train."""
    from repro.tp_step import TPTrainer, build_mesh, init_distributed, local_piece, parallelize_llama

    device = torch.device("cpu")
    created = init_distributed(device)
    try:
        torch.manual_seed(0)
        model = parallelize_llama(LlamaModel(CFG), build_mesh(device))
        trainer = TPTrainer(model, build_mesh(device), "torch", "TBS(4)", every=1, autocast=False)
        tokens = torch.randint(0, CFG.vocab, (2, CFG.seq_len), generator=torch.Generator().manual_seed(1))
        before = [local_piece(w).detach().clone() for w in trainer.weights]
        loss = trainer.step(tokens)
        masks = trainer.masks
        # the step's loss is that of the same initial model with its sparse weights masked
        with torch.no_grad():
            torch.manual_seed(0)
            fresh = LlamaModel(CFG)
            for lin, w0, m in zip(sparse_linears(fresh).values(), before, masks, strict=True):
                lin.weight.copy_(w0 * m)
            assert float(fresh.loss(tokens)) == pytest.approx(float(loss), rel=1e-6)
        after = [local_piece(w).detach() for w in trainer.weights]
        pruned = [(a[~m] != 0).float().mean().item() for a, m in zip(after, masks, strict=True)]
        assert min(pruned) > 0.99  # the pruned weights are still there, and were updated
        assert any(not torch.equal(a[~m], b[~m]) for a, b, m in zip(after, before, masks, strict=True))
        loss2 = trainer.step(tokens)  # the next regeneration reads the dense weights
        assert torch.isfinite(loss2)
        assert trainer.times_ms()["mask"] > 0
    finally:
        if created:
            dist.destroy_process_group()


def _rows_at(world: int, layers: int) -> list[dict]:
    """Step rows of every method and pattern (every=1) of one launch, with its setup rows."""
    from suites import fast_figure3_e2e as suite

    label = suite.model_label("map-neo-7b", layers, 28, world)
    common = dict(shape=label, device="cpu", profile="smoke")
    rows = [
        dict(method="setup", variant="", metric=m, value=v, **common)
        for m, v in (("world_size", world), ("layers", layers), ("paper_layers", 28))
    ]
    for method, pattern in suite.cases():
        variant = "dense" if method == "dense" else f"{pattern} every=1"
        for part, ms in (("fwd_bwd", 50.0), ("mask", 5.0 / world), ("pivot", 2.0 / world), ("optimizer", 3.0)):
            rows.append(dict(method=method, variant=variant, metric=f"{part}_ms", value=ms, **common))
        rows.append(dict(method=method, variant=variant, metric="step_ms", value=60.0 / world, **common))
    return rows


def test_plot_has_a_row_per_model_and_a_scaling_panel(monkeypatch, tmp_path):
    """Runs at world 1 and 2 merged: one row of panels for the model, a panel per world size, then
    the scaling panel (pivot and mask per block against the world size); nothing in one long row."""
    import pandas as pd

    import repro.plots
    from suites import fast_figure3_e2e as suite

    figs = []
    monkeypatch.setattr(repro.plots, "save", lambda fig, stem: figs.append(fig) or [])
    suite.plot(pd.DataFrame(_rows_at(1, 4) + _rows_at(2, 8)), tmp_path / "fig")
    titles = [ax.get_title() for ax in figs[0].axes if ax.get_visible()]
    assert len(titles) == 3, titles
    assert "1 GPU, masks every 1" in titles[0] and "2 GPUs" in titles[1] and "scaling" in titles[2]


def test_compare_gives_the_geometric_mean_beside_the_average():
    """One slow baseline pattern dominates the arithmetic mean of the per-pattern speedups (7B-cut11
    on 2 GPUs, be79020: 3.20x average, 1.90x geometric mean): both rows are in the table."""
    import math

    import pandas as pd

    from suites import fast_figure3_e2e as suite

    label = suite.model_label("map-neo-7b", 4, 30, 1)
    rows = [dict(method="setup", shape=label, variant="", metric=m, value=v) for m, v in
            (("world_size", 1), ("layers", 4), ("paper_layers", 30))]  # fmt: skip
    for pattern, torch_ms in (("TBS(4)", 100.0), ("TBS(8)", 1000.0)):
        for method, ms in (("fast", 100.0), ("torch", torch_ms), ("vegeta", torch_ms)):
            rows.append(dict(method=method, shape=label, variant=f"{pattern} every=1", metric="step_ms", value=ms))
    t = suite.compare(pd.DataFrame(rows)).set_index("pattern")
    assert t.loc["average (ours)", "fast_vs_torch"] == 5.5
    assert math.isclose(t.loc["geometric mean (ours)", "fast_vs_torch"], math.sqrt(10.0))
