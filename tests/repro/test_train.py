"""repro.train: config validation and JSON, exact resume (dense, fst, decay on weights, dense phases),
flip rate vs a direct count, run directories (finished runs are no-ops), data errors, the CLI,
and DDP on two CPU processes. CPU, tiny model, reference kernels (no Triton interpreter)."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from repro.data import DataError, TokenFile
from repro.data.tokens import Document, write_corpus
from repro.train import (
    TrainConfig,
    ensure_run,
    load_checkpoint,
    log_columns,
    lr_at,
    make_optimizer,
    train,
    train_step,
)
from repro.train.flip import FlipTracker, nm24_mask
from repro.train.parts import build_model
from repro.train.runs import run_id


@pytest.fixture(autouse=True)
def _reference_kernels(monkeypatch):
    """The PyTorch references of the mask and MVUE kernels: the interpreter would take minutes."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")


class _ByteEncoding:
    n_vocab = 256
    eot_token = 0

    def encode_ordinary_batch(self, texts: list[str]) -> list[list[int]]:
        return [[b or 1 for b in t.encode()] for t in texts]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A token corpus of byte ids (the tiny model's vocabulary) in the format of ``repro data build``."""
    out = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "and", "then", "slept"]
    docs = (Document(f"toy/{i}", " ".join(rng.choice(words, size=50)) + f" {i}.") for i in range(300))
    write_corpus(
        docs,
        out,
        _ByteEncoding(),
        tokenizer={"name": "bytes", "n_vocab": 256},
        sources=[{"name": "toy"}],
        val_fraction=0.1,
        progress=lambda *a, **k: None,
    )
    return out


def tiny(corpus: Path, **kw) -> TrainConfig:
    base = dict(
        model="tiny",
        seq_len=16,
        batch_size=2,
        steps=6,
        warmup=2,
        lr=3e-3,
        data=str(corpus),
        eval_every=3,
        eval_batches=2,
        checkpoint_every=0,
        amp="none",
        mask_interval=2,
        dense_fraction=1 / 3,
    )
    return TrainConfig(**{**base, **kw})


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, what",
    [
        ({"steps": 0}, "steps"),
        ({"batch_size": -1}, "batch_size"),
        ({"seq_len": True}, "seq_len"),
        ({"grad_accum": 1.5}, "grad_accum"),
        ({"lr": float("nan")}, "lr"),
        ({"lr": 0.0}, "lr"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"dense_fraction": -0.1}, "dense_fraction"),
        ({"dense_fraction": 1.2}, "dense_fraction"),
        ({"mode": "sparse"}, "mode"),
        ({"decay_on": "loss"}, "decay_on"),
        ({"dense_phase": "middle"}, "dense_phase"),
        ({"model": "gpt5"}, "model"),
        ({"amp": "fp8"}, "amp"),
        ({"warmup": 10, "steps": 5}, "warmup"),
        ({"betas": (0.9,)}, "betas"),
        ({"decay": float("inf")}, "decay"),
        ({"mvue": "yes"}, "mvue"),
        # the recipes apply lambda_W on the gradient only: on the weights it was silently dropped
        ({"mode": "step", "decay": 1e-3, "decay_on": "weight"}, "decay_on"),
        ({"mode": "bimask", "decay": 1e-3, "decay_on": "weight"}, "decay_on"),
    ],
)
def test_config_validation(kw, what):
    with pytest.raises(ValueError, match=f"TrainConfig.{what}"):
        TrainConfig(**kw)


def test_config_json_round_trip(tmp_path):
    cfg = TrainConfig(model="gpt2-tiny", mode="fst", mvue=False, betas=(0.8, 0.99), decay=2e-4, dense_phase="pretrain")
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    cfg.save(tmp_path / "c.json")
    assert TrainConfig.load(tmp_path / "c.json") == cfg
    with pytest.raises(ValueError, match="unknown TrainConfig key"):
        TrainConfig.from_dict({**cfg.to_dict(), "lr_typo": 1})
    over = cfg.with_overrides(["lr=0.001", "mode=srste", "betas=[0.9, 0.9]", "compile=true", "steps=700"])
    assert (over.lr, over.mode, over.betas, over.compile, over.steps) == (1e-3, "srste", (0.9, 0.9), True, 700)
    with pytest.raises(ValueError, match="key=value"):
        cfg.with_overrides(["nope=1"])


def test_recipe_derivations():
    cfg = TrainConfig(mode="fst", steps=12, warmup=0, decay=6e-5, grad_accum=2)
    assert cfg.layer_decay == 3e-5 and cfg.weight_decay_masked == 0.0  # per micro-batch backward
    assert [cfg.dense_at(s) for s in range(12)] == [False] * 10 + [True] * 2  # last 1/6
    pre = dataclasses.replace(cfg, dense_phase="pretrain")
    assert [pre.dense_at(s) for s in range(12)] == [True] * 2 + [False] * 10
    assert not any(dataclasses.replace(cfg, dense_phase="none").dense_at(s) for s in range(12))
    assert TrainConfig(mode="ste").layer_decay == 0.0 and TrainConfig(mode="dense").layer_decay == 0.0
    w = TrainConfig(mode="srste", decay_on="weight", decay=1e-4)
    assert w.layer_decay == 0.0 and w.weight_decay_masked == 1e-4
    assert TrainConfig(mode="ste").gpt2().ffn_mode == "srste" and TrainConfig(mode="half").gpt2().ffn_mode == "half"


# train_step -----------------------------------------------------------------------------------


def test_train_step_matches_manual_step_and_accumulates():
    from repro.models.gpt2 import build_gpt2

    torch.manual_seed(0)
    x = torch.randint(0, 256, (4, 16))
    y = torch.randint(0, 256, (4, 16))
    models = []
    for _ in range(3):
        torch.manual_seed(1)
        models.append(build_gpt2("tiny"))
    opts = [make_optimizer(m, 1e-3, 0.1, (0.9, 0.95)) for m in models]
    out = train_step(models[0], opts[0], x, y, grad_clip=1.0)
    loss = nn.functional.cross_entropy(models[1](x).float().flatten(0, 1), y.flatten())
    loss.backward()
    # in the optimizer's parameter order, as train_step sums the norms (another order can move the
    # float32 total by an ulp)
    norm = torch.nn.utils.clip_grad_norm_([p for g in opts[1].param_groups for p in g["params"]], 1.0)
    opts[1].step()
    assert out.loss.requires_grad is False and out.loss.ndim == 0
    assert torch.equal(out.loss, loss.detach()) and torch.equal(out.grad_norm, norm)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.equal(a, b)
    acc = train_step(models[2], opts[2], x, y, grad_accum=2, grad_clip=1.0)  # two halves, same mean loss
    assert acc.loss.item() == pytest.approx(out.loss.item(), rel=1e-5)
    assert all(p.grad is None for p in models[2].parameters())
    with pytest.raises(ValueError, match="grad_accum"):
        train_step(models[2], opts[2], x[:3], y[:3], grad_accum=2)


def test_lr_schedule():
    kw = dict(steps=10, lr=1.0, warmup=2, min_lr_ratio=0.1)
    assert [lr_at(s, **kw) for s in (0, 1)] == [0.5, 1.0]
    assert lr_at(2, **kw) == pytest.approx(1.0) and lr_at(10, **kw) == pytest.approx(0.1)


def test_fst_without_mvue_has_the_exact_weight_gradient():
    """SparseLinear(mvue=False): fst's dW is dY^T X (dense, exact); with MVUE it is an estimate."""
    from kernels.layers.sparse_linear import SparseLinear

    torch.manual_seed(0)
    x = torch.randn(8, 16)
    dy = torch.randn(8, 8)
    grads = {}
    for mvue in (True, False):
        layer = SparseLinear(16, 8, mode="fst", decay=0.0, mvue=mvue, seed=1)
        with torch.no_grad():
            layer.weight.copy_(torch.linspace(-1, 1, 128).reshape(8, 16))
        layer(x).backward(dy)
        grads[mvue] = layer.weight.grad
    torch.testing.assert_close(grads[False], dy.t() @ x)
    assert not torch.allclose(grads[True], dy.t() @ x)
    assert "mvue=False" in repr(SparseLinear(16, 8, mode="fst", mvue=False))
    with pytest.raises(TypeError, match="mvue"):
        SparseLinear(16, 8, mode="fst", mvue=1)


# flip rate ------------------------------------------------------------------------------------


def test_flip_rate_equals_direct_count():
    torch.manual_seed(0)
    a, b = nn.Linear(8, 4, bias=False), nn.Linear(16, 8, bias=False)
    tracker = FlipTracker({"a": a, "b": b})

    def mask(w: torch.Tensor) -> torch.Tensor:  # direct: 2 largest |w| of each 4 along the input
        g = w.detach().abs().reshape(w.shape[0], -1, 4)
        keep = torch.zeros_like(g, dtype=torch.bool)
        keep.scatter_(-1, g.topk(2, dim=-1).indices, True)
        return keep.reshape(w.shape)

    before = [mask(a.weight), mask(b.weight)]
    assert torch.equal(before[0], nm24_mask(a.weight))
    with torch.no_grad():
        a.weight[0, :4] = torch.tensor([4.0, 3.0, 0.1, 0.2])
        a.weight[1, :4] = torch.tensor([0.1, 0.2, 4.0, 3.0])
        a.weight[0, :4] = a.weight[0, :4][[2, 3, 0, 1]]  # row 0's group flips all four entries
        b.weight.mul_(-1)  # |w| unchanged: no flips
    after = [mask(a.weight), mask(b.weight)]
    changed = [int((x != y).sum()) for x, y in zip(before, after, strict=True)]
    rates = tracker.measure().tolist()
    assert changed[0] > 0 and changed[1] == 0
    assert rates[1] == pytest.approx(changed[0] / 32) and rates[2] == 0.0
    assert rates[0] == pytest.approx(sum(changed) / (32 + 128))  # overall: weighted by layer size
    assert tracker.measure().tolist() == [0.0, 0.0, 0.0]  # nothing changed since


def test_progress_lines_show_finite_loss_from_the_first_step(corpus, tmp_path, capsys, monkeypatch):
    """Each progress line reports the step it names (the log is drained first): no "loss nan",
    even where the device lags the host (on a GPU a step's end event is rarely done when its
    line prints; here the log never drains on its own)."""
    from repro.train import logs

    monkeypatch.setattr(logs.RunLog, "add", lambda self, rec: self.pending.append(rec))
    cfg = tiny(corpus, mode="dense", steps=3)
    train(cfg, tmp_path, progress=True, progress_every_s=0.0)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[train] step ")]
    assert [x.split()[2] for x in lines] == ["1/3", "2/3", "3/3"], lines
    for line in lines:
        loss = float(line.split("loss ")[1].split()[0])
        assert math.isfinite(loss), line
        assert "nan tok/s" not in line, line


def test_sparse_layer_flip_rates_in_the_log(corpus, tmp_path):
    cfg = tiny(corpus, mode="srste", steps=4, dense_phase="none")
    train(cfg, tmp_path, progress=False)
    log = rows(tmp_path / "log.csv")
    assert list(log[0]) == log_columns(["h.0.mlp.fc", "h.0.mlp.proj", "h.1.mlp.fc", "h.1.mlp.proj"])
    per = [[float(r[f"flip_rate.h.{i}.mlp.{n}"]) for i in (0, 1) for n in ("fc", "proj")] for r in log[1:]]
    sizes = [64 * 256, 256 * 64] * 2
    for r, p in zip(log[1:], per, strict=True):  # overall = size-weighted mean of the layers
        assert float(r["flip_rate"]) == pytest.approx(sum(x * n for x, n in zip(p, sizes, strict=True)) / sum(sizes))
    dense = tiny(corpus, mode="dense", steps=3)
    train(dense, tmp_path / "dense", progress=False)
    assert all(0.0 <= float(r["flip_rate"]) <= 1.0 for r in rows(tmp_path / "dense" / "log.csv"))  # mask never applied


# resume ---------------------------------------------------------------------------------------


RESUME_CASES = {
    "dense": {"mode": "dense"},
    "fst": {"mode": "fst"},  # dense fine-tuning: last 1/3 of the steps
    "fst-no-mvue": {"mode": "fst", "mvue": False, "dense_phase": "none"},
    "srste-decay-on-weight": {"mode": "srste", "decay_on": "weight", "decay": 0.05},
    "fst-dense-pretrain": {"mode": "fst", "dense_phase": "pretrain"},
    "weight24-accum": {"mode": "weight24", "grad_accum": 2, "decay": 1e-3},
    "step-auto": {"mode": "step"},  # AutoSwitch: at the latest at step 3 of 6
    "step-fixed": {"mode": "step", "step_switch": "fixed", "decay": 1e-3},  # switch after step 2
    "bimask": {"mode": "bimask", "decay": 1e-3},  # permutation searched every 2 steps
}


@pytest.mark.parametrize("case", list(RESUME_CASES))
def test_resume_is_bit_exact(corpus, tmp_path, case):
    cfg = tiny(corpus, **RESUME_CASES[case])
    straight = train(cfg, tmp_path / "straight", progress=False)
    assert straight.status == "finished" and len(straight.losses) == 6
    run = tmp_path / "split"
    stop = 3 if case != "fst-dense-pretrain" else 1  # pretrain: stopped inside the dense phase
    first = train(cfg, run, stop_at=stop, progress=False)
    assert first.status == "stopped" and first.end_step == stop
    second = train(cfg, run, progress=False)
    assert second.start_step == stop and second.status == "finished"
    assert first.losses + second.losses == straight.losses  # bit for bit
    a, b = rows(tmp_path / "straight" / "log.csv"), rows(run / "log.csv")
    drop = ("step_time_ms", "tokens_per_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == [
        {k: v for k, v in r.items() if k not in drop} for r in b
    ]
    assert rows(tmp_path / "straight" / "val.csv") == rows(run / "val.csv")
    ck = load_checkpoint(run)
    assert ck["step"] == 6 and TrainConfig.from_dict(ck["config"]) == cfg
    if cfg.mode == "step":  # the run did switch to 2:4 (fixed: after step 2; auto: by step 3)
        at = ck["optimizer"]["param_groups"][0]["step_switched_at"]
        assert (at == 2) if cfg.step_switch == "fixed" else (1 <= at <= 3)
        assert ck["sparse"] and all(v["switched"] for v in ck["sparse"].values())


def test_resume_after_a_crash_drops_later_log_rows(corpus, tmp_path):
    cfg = tiny(corpus, mode="fst", checkpoint_every=2)
    straight = train(cfg, tmp_path / "straight", progress=False)

    def crash(step: int) -> None:
        if step == 5:
            raise RuntimeError("simulated kill")

    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(cfg, run, progress=False, on_step=crash)
    assert load_checkpoint(run)["step"] == 4
    assert [int(r["step"]) for r in rows(run / "log.csv")] == [1, 2, 3, 4, 5]
    with open(run / "log.csv", "a") as fh:
        fh.write("6,1.0")  # a torn last line
    res = train(cfg, run, progress=False)
    assert res.start_step == 4 and res.losses == straight.losses[4:]
    assert [float(r["loss"]) for r in rows(run / "log.csv")] == straight.losses


def test_deadline_checkpoints_and_stops(corpus, tmp_path):
    cfg = tiny(corpus, steps=50)
    res = train(cfg, tmp_path, max_minutes=1e-9, progress=False)  # past the deadline after the first step
    assert res.status == "stopped" and res.end_step == 1 and load_checkpoint(tmp_path)["step"] == 1


def test_resume_refuses_another_config(corpus, tmp_path):
    cfg = tiny(corpus)
    train(cfg, tmp_path, stop_at=2, progress=False)
    with pytest.raises(ValueError, match=r"cannot resume .*lr: 0.003 \(saved\) vs 0.001 \(now\)"):
        train(dataclasses.replace(cfg, lr=1e-3), tmp_path, progress=False)
    train(dataclasses.replace(cfg, checkpoint_every=5), tmp_path, progress=False)  # allowed to change


# runs -----------------------------------------------------------------------------------------


def test_ensure_run_layout_and_finished_run_is_a_no_op(corpus, tmp_path):
    cfg = tiny(corpus, mode="fst")
    run = tmp_path / "run"
    assert ensure_run(cfg, run, stop_at=2, gemm_tflops=1.0, progress=False) == "stopped"
    assert not (run / "summary.json").exists()
    assert ensure_run(cfg, run, gemm_tflops=1.0, progress=False) == "finished"
    assert {p.name for p in run.iterdir()} == {
        "config.json",
        "provenance.json",
        "log.csv",
        "val.csv",
        "checkpoint.pt",
        "summary.json",
    }
    assert TrainConfig.load(run / "config.json") == cfg
    prov = json.loads((run / "provenance.json").read_text())
    assert len(prov["calls"]) == 2 and prov["device"] == "cpu" and "torch_version" in prov
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 6
    assert summary["final_val_loss"] == float(rows(run / "val.csv")[-1]["val_loss"])
    assert summary["median_tokens_per_s"] > 0 and summary["mfu"] > 0
    stamp = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    assert ensure_run(cfg, run, progress=False) == "finished"
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == stamp  # nothing touched
    with pytest.raises(ValueError, match="cannot resume"):
        ensure_run(dataclasses.replace(cfg, seed=1), run, progress=False)
    assert summary["world_size"] == 1


def test_another_process_count_is_another_run(corpus, tmp_path, monkeypatch):
    """torchrun with 2 processes draws a global batch of 2 x batch_size: it must neither report a
    1-process run's folder as finished nor resume one; its default folder is its own."""
    cfg = tiny(corpus)
    run = tmp_path / "run"
    assert ensure_run(cfg, run, gemm_tflops=1.0, progress=False) == "finished"
    assert not run_id(cfg).endswith("-w1") and run_id(cfg, 2) == run_id(cfg) + "-w2"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert run_id(cfg).endswith("-w2")
    stamp = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    with pytest.raises(DataError, match="trained with 1 process.*this call has 2"):
        ensure_run(cfg, run, progress=False)
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == stamp  # refused before any write


def test_missing_or_corrupt_token_file(corpus, tmp_path):
    with pytest.raises(DataError, match="python -m repro data build.*snakemake data"):
        ensure_run(tiny(tmp_path / "nowhere"), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in corpus.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    data = bytearray((bad / "train.bin").read_bytes())
    (bad / "train.bin").write_bytes(bytes(data[:-2]))
    with pytest.raises(DataError, match="truncated.*python -m repro data build"):
        train(tiny(bad), tmp_path / "r2", progress=False)
    data[10] ^= 0xFF
    (bad / "train.bin").write_bytes(bytes(data))
    with pytest.raises(DataError, match="corrupt.*python -m repro data build"):
        train(tiny(bad), tmp_path / "r3", progress=False)


def test_cli_train(corpus, tmp_path, capsys):
    from repro.cli import main

    cfg_path = tmp_path / "cfg.json"
    tiny(corpus, steps=4).save(cfg_path)
    cmd = ["train", "--config", str(cfg_path), "--run-dir", str(tmp_path / "run")]
    assert main([*cmd, "--set", "mode=srste", "--stop-at", "2"]) == 0
    out = capsys.readouterr()
    assert "stopped" in out.out and "[train]" in out.err
    assert main([*cmd, "--set", "mode=srste"]) == 0
    assert "finished" in capsys.readouterr().out
    assert len(rows(tmp_path / "run" / "log.csv")) == 4
    assert main([*cmd, "--set", "lr=-1"]) == 2
    assert "TrainConfig.lr" in capsys.readouterr().err
    assert main(cmd) == 2  # mode differs from the run's config.json
    assert "cannot resume" in capsys.readouterr().err


# DDP --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, cfg_dict: dict, run_dir: str) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    os.environ["TRITON_INTERPRET"] = "0"
    torch.set_num_threads(1)
    train(TrainConfig.from_dict(cfg_dict), run_dir, progress=False, device="cpu")


def test_ddp_two_processes_match_one(corpus, tmp_path):
    """2 ranks x 2 sequences (gloo) train like 1 process x 4 sequences: same data, averaged gradients."""
    cfg = tiny(corpus, steps=3, batch_size=2, eval_every=0)
    torch.multiprocessing.spawn(
        _ddp_worker, args=(2, _free_port(), cfg.to_dict(), str(tmp_path / "ddp")), nprocs=2, join=True
    )
    single = train(dataclasses.replace(cfg, batch_size=4), tmp_path / "one", progress=False)
    got = [float(r["loss"]) for r in rows(tmp_path / "ddp" / "log.csv")]
    assert got == pytest.approx(single.losses, rel=1e-5)  # the loss logged is the mean over the ranks
    assert int(rows(tmp_path / "ddp" / "log.csv")[-1]["tokens"]) == 3 * 4 * 16
    a = load_checkpoint(tmp_path / "ddp")["model"]
    b = load_checkpoint(tmp_path / "one")["model"]
    for k in b:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)
    assert single.status == "finished"


# FAST Table I models (arch="llama") -----------------------------------------------------------


def test_widened_ffn_matches_dense_nonzeros():
    from repro.train.flexmask import LLAMA_MODELS, llama_config, nonzero_weights, widened_ffn

    for name in LLAMA_MODELS:
        dense = llama_config(name, "dense", 16)
        sparse = llama_config(name, "4:8", 16)
        assert sparse.ffn == widened_ffn(dense.hidden, dense.ffn) and sparse.ffn % 8 == 0
        a, b = nonzero_weights(dense, "dense"), nonzero_weights(sparse, "4:8")
        assert a <= b <= a + dense.layers * 3 * dense.hidden * 8  # equal up to the rounding of d_ff


@pytest.mark.parametrize("mask", ["us", "4:8"])
def test_llama_flex_mask_run_resumes_bit_exact(corpus, tmp_path, mask):
    cfg = tiny(corpus, arch="llama", model="llama-micro", mask=mask, mask_interval=2)
    straight = train(cfg, tmp_path / "straight", progress=False)
    run = tmp_path / "split"
    first = train(cfg, run, stop_at=3, progress=False)
    second = train(cfg, run, progress=False)
    assert first.losses + second.losses == straight.losses
    ck = load_checkpoint(run)
    masks = [v["mask"] for v in ck["sparse"].values()]
    assert len(masks) == 7 and all(abs(m.float().mean().item() - 0.5) < 0.02 for m in masks)


def test_llama_config_validation():
    with pytest.raises(ValueError, match="TrainConfig.model"):
        TrainConfig(arch="llama", model="tiny")
    with pytest.raises(ValueError, match="TrainConfig.mask"):
        TrainConfig(mask="4:8")
    assert "arch" not in TrainConfig().to_dict() and TrainConfig(arch="llama", model="llama-tiny").to_dict()["arch"]


def test_flex_masked_linear_refuses_bad_state_and_interval():
    """A wrong-shaped mask was broadcast into the layer (all False, silently) and mask_interval
    was truncated by int() (2.9 -> 2; 0 failed later with ZeroDivisionError)."""
    from repro.train.flexmask import FlexMaskedLinear

    lin = FlexMaskedLinear(16, 8, mask="4:8")
    state = lin.sparse_state_dict()
    lin.load_sparse_state_dict(state)  # its own state loads
    for bad in (torch.ones(16, dtype=torch.bool), state["mask"].float(), None):
        with pytest.raises(ValueError, match="mask"):
            lin.load_sparse_state_dict({**state, "mask": bad})
    with pytest.raises(ValueError, match="keys"):
        lin.load_sparse_state_dict({"mode": "4:8"})
    for interval, err in ((2.9, TypeError), (0, ValueError), (True, TypeError)):
        with pytest.raises(err, match="mask_interval"):
            FlexMaskedLinear(16, 8, mask="4:8", mask_interval=interval)


def test_log_without_flip_tracking_keeps_its_columns_across_a_resume(corpus, tmp_path):
    """track_flip=False wrote rows shorter than the header (step_time_ms under a flip column), and
    a resume dropped every one of them as torn."""
    import csv

    cfg = tiny(corpus, track_flip=False)
    run = tmp_path / "run"
    train(cfg, run, stop_at=3, progress=False)
    train(cfg, run, progress=False)
    with open(run / "log.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    assert [r[0] for r in body] == ["1", "2", "3", "4", "5", "6"]
    assert all(len(r) == len(header) for r in body)
    times = [float(r[header.index("step_time_ms")]) for r in body]
    assert all(t > 0 for t in times) and all(r[header.index("flip_rate")] == "" for r in body)


def test_llama_mask_flip_rates_are_logged(corpus, tmp_path):
    """A Llama run's masked linears count their own flips; the log must carry them (it had only blanks)."""
    cfg = tiny(corpus, arch="llama", model="llama-micro", mask="4:8", mask_interval=1, lr=3e-2)
    train(cfg, tmp_path, progress=False)
    log = rows(tmp_path / "log.csv")
    per = [c for c in log[0] if c.startswith("flip_rate.")]
    assert len(per) == 7 and "flip_rate.layers.0.ffn.gate" in per  # llama-micro: one block of seven linears
    rates = [float(r["flip_rate"]) for r in log[1:]]
    assert all(0.0 <= x <= 1.0 for x in rates) and max(rates) > 0.0
    dense = tiny(corpus, arch="llama", model="llama-micro", steps=2)
    train(dense, tmp_path / "dense", progress=False)
    assert list(rows(tmp_path / "dense" / "log.csv")[0]) == log_columns([])  # no mask, no flip columns


def test_whole_numbers_in_float_fields_give_one_run_id():
    a = TrainConfig(lr=1, grad_clip=0)
    b = TrainConfig(lr=1.0, grad_clip=0.0)
    c = TrainConfig.from_dict(json.loads('{"lr": 1, "grad_clip": 0}'))
    assert a == b == c and run_id(a) == run_id(b) == run_id(c)
    assert isinstance(c.lr, float) and isinstance(c.grad_clip, float)


def test_fp16_runs_pass_the_loss_scaler_to_the_step(corpus, tmp_path, monkeypatch):
    """fp16 autocast needs loss scaling; the loop built a GradScaler but never handed it to the step.
    A CPU GradScaler stands in for the CUDA one (the CPU has no fp16 autocast here)."""
    import repro.train.loop as loop

    scaler = torch.amp.GradScaler("cpu")
    seen = []
    real = loop.train_step
    monkeypatch.setattr(loop, "loss_scaler", lambda amp: scaler)
    monkeypatch.setattr(loop, "train_step", lambda *a, **k: seen.append(k.get("scaler")) or real(*a, **k))
    train(tiny(corpus, steps=3), tmp_path, progress=False)
    assert seen == [scaler] * 3
    assert load_checkpoint(tmp_path)["scaler"]["_growth_tracker"] == 3  # three unscaled, finite steps


@pytest.mark.parametrize(
    "kw", [{"mode": "fst", "dense_phase": "none"}, {"arch": "llama", "model": "llama-micro", "mask": "4:8"}]
)
def test_eval_load_model_rebuilds_a_training_run(corpus, tmp_path, kw):
    """repro.eval's loader on a repro.train checkpoint (its config is a TrainConfig): it raised before."""
    from repro.eval.checkpoint import load_model

    cfg = tiny(corpus, steps=2, **kw)
    train(cfg, tmp_path, progress=False)
    model = load_model(tmp_path)
    ck = load_checkpoint(tmp_path)
    ref = build_model(cfg, torch.device("cpu"))
    ref.load_state_dict(ck["model"])
    for name, state in ck["sparse"].items():
        ref.get_submodule(name).load_sparse_state_dict(state)
    toks = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert torch.equal(model(toks), ref.eval()(toks))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (fp16 autocast and its GradScaler)")
@pytest.mark.parametrize("mode", ["dense", "fst"])
def test_fp16_run_on_the_gpu_scales_its_loss_and_resumes_the_scaler(corpus, tmp_path, mode):
    """The real CUDA GradScaler on an fp16 run: losses finite, the scaler's state checkpointed, and a
    stopped-and-resumed run ends in the same scaler state and losses as a straight one."""
    cfg = tiny(corpus, mode=mode, amp="fp16")
    straight = train(cfg, tmp_path / "straight", device="cuda", progress=False)
    assert straight.status == "finished" and all(math.isfinite(x) for x in straight.losses)
    s = load_checkpoint(tmp_path / "straight")["scaler"]
    assert s is not None and s["scale"] > 0 and s["_growth_tracker"] >= 1
    first = train(cfg, tmp_path / "split", stop_at=3, device="cuda", progress=False)
    second = train(cfg, tmp_path / "split", device="cuda", progress=False)
    assert first.losses + second.losses == straight.losses
    assert load_checkpoint(tmp_path / "split")["scaler"] == s


def test_log_writes_a_measured_inf_grad_norm_and_leaves_only_unmeasured_ones_blank(tmp_path):
    """An fp16 step its scaler skips has an inf gradient norm; it was written as "", the cell of a norm
    never measured, so a reader could not tell an overflow from no measurement."""
    from repro.train.logs import Pending, RunLog

    log = RunLog(tmp_path, [], 0, enabled=True)
    one = torch.tensor(1.0)
    for step, g in enumerate([torch.tensor(float("inf")), torch.tensor(float("nan")), None, torch.tensor(2.5)], 1):
        log.add(Pending(step, step, 1, 0.1, one, g, None, 0.0, 1e-3))
    log.flush()
    log.close()
    assert [r["grad_norm"] for r in rows(tmp_path / "log.csv")] == ["inf", "nan", "", "2.5"]
    assert math.isinf(float(rows(tmp_path / "log.csv")[0]["grad_norm"]))


@pytest.mark.parametrize("stop_at", [0, 2, 3])
def test_stop_at_or_before_the_checkpoint_runs_no_step(corpus, tmp_path, stop_at):
    """Resuming at step 3 with stop_at <= 3 reported end_step < start_step (steps 4..2); now no step
    runs, the result says so, and the checkpoint is untouched."""
    cfg = tiny(corpus)
    train(cfg, tmp_path, stop_at=3, progress=False)
    before = (tmp_path / "checkpoint.pt").read_bytes()
    res = train(cfg, tmp_path, stop_at=stop_at, progress=False)
    assert (res.status, res.start_step, res.end_step, res.losses) == ("stopped", 3, 3, [])
    assert (tmp_path / "checkpoint.pt").read_bytes() == before
    with pytest.raises(ValueError, match="stop_at"):
        train(cfg, tmp_path, stop_at=-1, progress=False)


@pytest.mark.parametrize("bad", ["{not json", "[]", '{"calls": 3}'])
def test_an_unreadable_provenance_is_kept_aside_never_overwritten(corpus, tmp_path, bad, capsys):
    """A provenance.json that did not parse was silently replaced: the run's earlier calls were lost."""
    cfg = tiny(corpus, steps=2)
    run = tmp_path / "run"
    ensure_run(cfg, run, stop_at=1, progress=False)
    (run / "provenance.json").write_text(bad)
    assert ensure_run(cfg, run, progress=False) == "finished"
    kept = list(run.glob("provenance.unreadable-*.json"))
    assert len(kept) == 1 and kept[0].read_text() == bad
    doc = json.loads((run / "provenance.json").read_text())
    assert doc["earlier_provenance_unreadable"] == kept[0].name and len(doc["calls"]) == 1
    assert "unreadable" in capsys.readouterr().err


def _byte_corpus(out: Path, word: str, val_fraction: float = 0.1) -> Path:
    docs = (Document(f"toy/{i}", f"{word} {i} " * 20) for i in range(200))
    write_corpus(docs, out, _ByteEncoding(), tokenizer={"name": "bytes", "n_vocab": 256}, sources=[{"name": "toy"}],
                 val_fraction=val_fraction, progress=lambda *a, **k: None)  # fmt: skip
    return out


def test_a_rebuilt_corpus_is_never_resumed_on_or_reported_as_seen(tmp_path):
    """A resume after the corpus was rebuilt with other tokens went on with them, and a finished run
    was reported finished for a corpus it never saw; both are refused now, naming the cause."""
    data = _byte_corpus(tmp_path / "data", "cat")
    cfg = tiny(data, steps=4)
    assert ensure_run(cfg, tmp_path / "run", stop_at=2, progress=False) == "stopped"
    _byte_corpus(data, "dog", val_fraction=0.2)  # the same folder rebuilt
    with pytest.raises(DataError, match="cannot resume .*rebuilt with other tokens"):
        ensure_run(cfg, tmp_path / "run", progress=False)
    _byte_corpus(data, "cat")  # the first corpus again, byte for byte: the run continues and finishes
    assert ensure_run(cfg, tmp_path / "run", gemm_tflops=1.0, progress=False) == "finished"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["data"]["train"]["tokens"] > 0
    assert ensure_run(cfg, tmp_path / "run", progress=False) == "finished"
    _byte_corpus(data, "dog")
    with pytest.raises(DataError, match="finished on another corpus"):
        ensure_run(cfg, tmp_path / "run", progress=False)


def test_a_val_split_too_short_for_one_window_fails_before_the_first_step(tmp_path):
    """val_fraction 0 trained until the first evaluation, then failed and lost those steps."""
    data = _byte_corpus(tmp_path / "data", "cat", val_fraction=0.0)
    with pytest.raises(DataError, match="val.bin holds 0 tokens, too few for one window"):
        train(tiny(data), tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "log.csv").exists()
    with pytest.raises(DataError, match="val.bin holds 0 tokens"):  # ensure_run: no half-made folder,
        ensure_run(tiny(data), tmp_path / "run2", progress=False)  # whose config.json would refuse a fix
    assert not (tmp_path / "run2").exists()
    cfg = dataclasses.replace(tiny(data), seq_len=len(TokenFile(data, "train")))  # a train split too short
    with pytest.raises(DataError, match="train.bin holds .* too few for one window"):
        ensure_run(cfg, tmp_path / "run3", progress=False)
    assert not (tmp_path / "run3").exists()


@pytest.mark.parametrize("bad", [["--stop-at", "-1"], ["--max-minutes", "-5"], ["--max-minutes", "nan"]])
def test_cli_train_refuses_bad_limits_before_writing(corpus, tmp_path, capsys, bad):
    """--stop-at -1 gave a traceback after writing the run folder; --max-minutes -5 stopped after one
    step and nan meant no limit."""
    from repro.cli import main

    cfg_path = tmp_path / "cfg.json"
    tiny(corpus).save(cfg_path)
    assert main(["train", "--config", str(cfg_path), "--run-dir", str(tmp_path / "run"), *bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("stop_at must be" in err or "max_minutes must be" in err)
    assert not (tmp_path / "run").exists()


def test_each_rank_draws_its_own_mvue_noise():
    """Every rank built the same model from ``torch.manual_seed(cfg.seed)``, and so the same MVUE
    seeds: the ranks applied the same random choices to different data (DDP also broadcast rank
    0's buffers before each forward, which would have undone any per-rank seed)."""
    from repro.train.parts import MVUE_RANK_STRIDE, spread_mvue_seeds

    cfg = TrainConfig(model="tiny", seq_len=16, batch_size=2, steps=2, warmup=1, mode="fst", amp="none")
    seeds = []
    for rank in (0, 1, 2):
        model = build_model(cfg, torch.device("cpu"))
        spread_mvue_seeds(model, rank)
        seeds.append([int(m.mvue_seed) for m in model.modules() if getattr(m, "mvue_seed", None) is not None])
    assert seeds[0] and len(set(map(tuple, seeds))) == 3
    assert all((b - a) % 2**62 == MVUE_RANK_STRIDE for a, b in zip(seeds[0], seeds[1], strict=True))
    assert all(0 <= s < 2**62 for s in seeds[2])
    import inspect

    from repro.train import loop

    assert "broadcast_buffers=False" in inspect.getsource(loop._train)


def test_the_cuda_rng_is_saved_and_restored_on_this_process_device(monkeypatch):
    """Rank 0 saved every device's CUDA generator and each rank restored them by index, so rank r's
    device got a state rank 0 never advanced; now the saver's device state goes onto each rank's."""
    from repro.train import checkpoint as ck

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": torch.tensor([7], dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": calls.append((int(state), device)))
    state = ck.rng_state()
    assert [int(t) for t in state["cuda"]] == [7]
    ck.set_rng_state(state)
    assert calls == [(7, "cuda")]  # the current device, whichever this rank's is


def test_a_cpu_run_under_torchrun_on_a_gpu_host_joins_with_gloo(monkeypatch):
    """The backend followed torch.cuda.is_available(), not the device asked for: nccl with CPU
    tensors, which fails at the first collective."""
    import torch.distributed as dist

    from repro.train import parts

    got = {}
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # set by the nccl branch: kept in this test
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: got.setdefault("set_device", i))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: got.setdefault("backend", backend))
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    parts.init_distributed("cpu")
    assert got == {"backend": "gloo"}
    got.clear()
    parts.init_distributed(None)
    assert got == {"set_device": 0, "backend": "nccl"}


def test_deadline_looks_as_far_ahead_as_the_ranks_next_agreement():
    from repro.train.loop import RANKS_AGREE_EVERY, past_deadline

    # one process decides every step: stop when the next step would end within a step of the deadline
    assert not past_deadline(0.0, 1.0, 2.5, steps_ahead=1)
    assert past_deadline(0.0, 1.0, 2.0, steps_ahead=1)
    # under torchrun the ranks next agree RANKS_AGREE_EVERY steps later: 15 steps' room is not enough
    assert past_deadline(0.0, 1.0, 15.0, steps_ahead=RANKS_AGREE_EVERY)
    assert not past_deadline(0.0, 1.0, RANKS_AGREE_EVERY + 1.5, steps_ahead=RANKS_AGREE_EVERY)
