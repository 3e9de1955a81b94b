"""Training loop: schedule, logs, the mask-schedule protocol, exact resume, data sources, bad input."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from repro.models.gpt2 import CONFIGS, build_gpt2, ffn_linears
from repro.train import (
    CHECKPOINT_NAME,
    LOG_COLUMNS,
    StepInfo,
    load_checkpoint,
    lr_at,
    synthetic_batches,
    token_file_batches,
    train,
)

TINY = CONFIGS["tiny"]
B, T = 4, 32


def tiny_model(seed: int = 0, **kw) -> nn.Module:
    torch.manual_seed(seed)
    return build_gpt2(dataclasses.replace(TINY, **kw))


def read_log(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows


def pattern_file(tmp_path: Path, n: int = 5000, dtype=np.uint16, period: int = 37) -> Path:
    """A token file with a periodic sequence: next token is a function of the current one (learnable)."""
    path = tmp_path / f"tokens_{np.dtype(dtype).name}.bin"
    (np.arange(n) % period * 5 % TINY.vocab_size).astype(dtype).tofile(path)
    return path


class ScheduledLinear(nn.Linear):
    """An nn.Linear speaking the SparseLinear mask-schedule protocol (records its calls)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, report: bool = True) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.calls: list[tuple[int, int]] = []
        self.report = report
        self.flip_rate: float | torch.Tensor | None = None

    def after_optimizer_step(self, step: int, total_steps: int) -> None:
        self.calls.append((step, total_steps))
        if self.report:
            self.flip_rate = step / 100 if self.out_features > self.in_features else torch.tensor(step / 50)


# schedule -------------------------------------------------------------------------------------


def test_lr_schedule():
    kw = dict(steps=100, lr=1.0, warmup=10, min_lr_ratio=0.1)
    assert lr_at(0, **kw) == pytest.approx(0.1)
    assert lr_at(9, **kw) == pytest.approx(1.0)
    assert lr_at(10, **kw) == pytest.approx(1.0)
    assert lr_at(55, **kw) == pytest.approx(0.1 + 0.45)
    assert lr_at(100, **kw) == pytest.approx(0.1)
    vals = [lr_at(s, **kw) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(vals, vals[1:], strict=False))


# training, logs, protocol ---------------------------------------------------------------------


def test_loss_decreases_on_a_token_file(tmp_path):
    data = token_file_batches(pattern_file(tmp_path), B, T, seed=0)
    res = train(tiny_model(), data, steps=30, lr=3e-3, warmup=3, weight_decay=0.0, progress=False)
    assert res.finished and res.end_step == 30 and res.start_step == 0
    assert len(res.losses) == 30 and len(res.step_times_ms) == 30
    assert res.losses[-1] < 0.5 * res.losses[0], res.losses
    assert res.tokens_per_step == B * T and res.tokens_per_s > 0 and res.timer == "cpu-perf_counter"


def test_csv_log_columns_and_values(tmp_path):
    log = tmp_path / "log" / "train.csv"
    res = train(
        tiny_model(),
        synthetic_batches(TINY.vocab_size, B, T, seed=1),
        steps=8,
        lr=1e-3,
        warmup=2,
        min_lr_ratio=0.1,
        log_csv=log,
        progress=False,
    )
    with open(log, newline="") as fh:
        header = next(csv.reader(fh))
    assert tuple(header) == LOG_COLUMNS
    rows = read_log(log)
    assert [int(r["step"]) for r in rows] == list(range(1, 9))
    assert [float(r["loss"]) for r in rows] == res.losses
    for i, r in enumerate(rows):
        assert float(r["lr"]) == pytest.approx(lr_at(i, steps=8, lr=1e-3, warmup=2, min_lr_ratio=0.1))
        assert float(r["grad_norm"]) > 0 and math.isfinite(float(r["grad_norm"]))
        assert float(r["step_time_ms"]) > 0
        assert float(r["tokens_per_s"]) == pytest.approx(B * T / (float(r["step_time_ms"]) / 1e3))
        assert r["flip_rate"] == ""  # no module reports one


def test_after_optimizer_step_protocol_and_flip_rate(tmp_path):
    made: list[ScheduledLinear] = []

    def factory(i: int, o: int, bias: bool = True) -> nn.Module:
        made.append(ScheduledLinear(i, o, bias))
        return made[-1]

    torch.manual_seed(0)
    model = build_gpt2(TINY, linear_factory=factory)
    quiet = ScheduledLinear(4, 4, report=False)  # has the hook, never reports a flip rate
    model.extra = quiet
    log = tmp_path / "log.csv"
    train(model, synthetic_batches(TINY.vocab_size, B, T), steps=5, warmup=1, log_csv=log, progress=False)
    assert [id(m) for m in made] == [id(m) for m in ffn_linears(model)]
    for m in [*made, quiet]:
        assert m.calls == [(s, 5) for s in range(1, 6)]
    # fc (out > in) reports step/100 as a float, proj a tensor step/50: mean over the 2 * n_layer reporters
    flips = [float(r["flip_rate"]) for r in read_log(log)]
    assert flips == pytest.approx([(s / 100 + s / 50) / 2 for s in range(1, 6)])


def test_step_hooks_and_progress(capsys):
    seen: list[StepInfo] = []
    model = tiny_model()
    train(
        model,
        synthetic_batches(TINY.vocab_size, 2, 16),
        steps=3,
        warmup=0,
        step_hooks=[seen.append],
        progress=True,
        progress_every_s=0.0,
    )
    assert [i.step for i in seen] == [1, 2, 3]
    assert all(i.total_steps == 3 and i.model is model and i.loss.ndim == 0 for i in seen)
    err = capsys.readouterr().err
    assert "[train] step 3/3" in err and "ms/step" in err and "ETA" in err


def test_iterator_data_and_no_clipping():
    src = synthetic_batches(TINY.vocab_size, 2, 16, seed=3)
    batches = [src(s) for s in range(4)]
    res = train(tiny_model(), iter(batches), steps=4, warmup=0, grad_clip=None, progress=False)
    assert len(res.losses) == 4
    with pytest.raises(ValueError, match="ran out"):
        train(tiny_model(), iter(batches[:2]), steps=4, warmup=0, progress=False)


# checkpoints and resume -----------------------------------------------------------------------


def _run(tmp_path: Path | None, **kw):
    data = synthetic_batches(TINY.vocab_size, B, T, seed=7)
    model = tiny_model(seed=kw.pop("model_seed", 0), dropout=0.1)  # dropout: the RNG state must be restored too
    ckpt = None if tmp_path is None else tmp_path / "ckpt"
    return train(model, data, steps=6, lr=2e-3, warmup=2, checkpoint_dir=ckpt, progress=False, **kw)


def test_resume_is_exact(tmp_path):
    straight = _run(None)
    first = _run(tmp_path, stop_at=3, log_csv=tmp_path / "log.csv")
    assert first.end_step == 3 and not first.finished
    assert (tmp_path / "ckpt" / CHECKPOINT_NAME).is_file()
    # a different initialisation: everything must come from the checkpoint
    second = _run(tmp_path, resume=True, model_seed=123, log_csv=tmp_path / "log.csv")
    assert second.start_step == 3 and second.end_step == 6 and second.finished
    assert first.losses + second.losses == straight.losses  # exact
    rows = read_log(tmp_path / "log.csv")
    assert [int(r["step"]) for r in rows] == list(range(1, 7))
    assert [float(r["loss"]) for r in rows] == straight.losses
    ckpt = load_checkpoint(tmp_path / "ckpt")
    assert ckpt["step"] == 6 and ckpt["config"]["d_model"] == TINY.d_model and ckpt["train"]["steps"] == 6
    # resuming a finished run does nothing
    again = _run(tmp_path, resume=True)
    assert again.losses == [] and again.end_step == 6


def test_resume_after_crash_drops_later_log_rows(tmp_path):
    straight = _run(None)

    def crash(info: StepInfo) -> None:
        if info.step == 5:
            raise RuntimeError("simulated crash")

    log = tmp_path / "log.csv"
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(tmp_path, checkpoint_every=2, log_csv=log, step_hooks=[crash])
    assert load_checkpoint(tmp_path / "ckpt")["step"] == 4
    assert [int(r["step"]) for r in read_log(log)] == [1, 2, 3, 4, 5]  # step 5 logged before the crash
    with open(log, "a") as fh:
        fh.write("6,1.0")  # a torn last line
    res = _run(tmp_path, resume=True, log_csv=log)
    assert res.start_step == 4 and res.losses == straight.losses[4:]
    rows = read_log(log)
    assert [int(r["step"]) for r in rows] == list(range(1, 7))
    assert [float(r["loss"]) for r in rows] == straight.losses


def test_fresh_run_refuses_to_overwrite(tmp_path):
    _run(tmp_path, stop_at=2)
    with pytest.raises(FileExistsError, match="resume=True"):
        _run(tmp_path)
    log = tmp_path / "other.csv"
    log.write_text("step\n")
    with pytest.raises(FileExistsError, match="resume=True"):
        train(tiny_model(), synthetic_batches(256, 2, 8), steps=2, log_csv=log, progress=False)


def test_resume_with_another_schedule_is_refused(tmp_path):
    _run(tmp_path, stop_at=2)
    data = synthetic_batches(TINY.vocab_size, B, T, seed=7)
    with pytest.raises(ValueError, match="different schedule"):
        train(tiny_model(), data, steps=8, lr=2e-3, warmup=2, checkpoint_dir=tmp_path / "ckpt", resume=True)


def test_resume_without_checkpoint_starts_fresh(tmp_path):
    res = _run(tmp_path, resume=True)
    assert res.start_step == 0 and res.end_step == 6


# data sources ---------------------------------------------------------------------------------


def test_synthetic_batches_deterministic():
    src = synthetic_batches(100, 3, 10, seed=5)
    x, y = src(4)
    assert x.shape == y.shape == (3, 10) and x.dtype == torch.int64
    assert (x[:, 1:] == y[:, :-1]).all()
    assert int(x.max()) < 100 and int(x.min()) >= 0
    x2, _ = src(4)
    assert torch.equal(x, x2)
    assert not torch.equal(x, src(5)[0])
    assert not torch.equal(x, synthetic_batches(100, 3, 10, seed=6)(4)[0])
    it = iter(src)
    assert torch.equal(next(it)[0], src(0)[0]) and torch.equal(next(it)[0], src(1)[0])


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_token_file_windows(tmp_path, dtype):
    path = tmp_path / "t.bin"
    data = (np.arange(1000) * 7 + 70000 * (dtype == np.uint32)).astype(dtype)
    data.tofile(path)
    src = token_file_batches(path, 4, 16, seed=0, dtype=np.dtype(dtype).name)
    assert src.n_tokens == 1000
    x, y = src(0)
    assert x.shape == (4, 16)
    for row_x, row_y in zip(x.numpy(), y.numpy(), strict=True):
        start = np.flatnonzero(data == row_x[0])[0]
        assert (row_x == data[start : start + 16]).all() and (row_y == data[start + 1 : start + 17]).all()
    assert torch.equal(src(3)[0], token_file_batches(path, 4, 16, seed=0, dtype=np.dtype(dtype).name)(3)[0])


def test_token_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        token_file_batches(tmp_path / "missing.bin", 2, 8)
    short = tmp_path / "short.bin"
    np.arange(8, dtype=np.uint16).tofile(short)
    with pytest.raises(ValueError, match="seq \\+ 1 = 9"):
        token_file_batches(short, 2, 8)
    assert token_file_batches(short, 2, 7)(0)[0].shape == (2, 7)  # exactly one window fits
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x00" * 7)
    with pytest.raises(ValueError, match="multiple"):
        token_file_batches(odd, 1, 2)
    with pytest.raises(ValueError, match="uint16 or uint32"):
        token_file_batches(short, 1, 2, dtype="int64")
    with pytest.raises(ValueError, match="batch"):
        token_file_batches(short, 0, 2)


# bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, err, what",
    [
        ({"steps": 0}, ValueError, "steps"),
        ({"steps": -3}, ValueError, "steps"),
        ({"steps": True}, ValueError, "steps"),
        ({"lr": 0.0}, ValueError, "lr"),
        ({"warmup": 11}, ValueError, "warmup"),
        ({"min_lr_ratio": 1.5}, ValueError, "min_lr_ratio"),
        ({"betas": (0.9,)}, ValueError, "betas"),
        ({"grad_clip": 0.0}, ValueError, "grad_clip"),
        ({"amp_dtype": torch.float32}, ValueError, "amp_dtype"),
        ({"checkpoint_every": 2}, ValueError, "checkpoint_dir"),
        ({"resume": True}, ValueError, "checkpoint_dir"),
        ({"stop_at": 11}, ValueError, "stop_at"),
        ({"step_hooks": [1]}, TypeError, "step_hooks"),
    ],
)
def test_bad_arguments(kw, err, what):
    args = {"steps": 10, "progress": False, **kw}
    with pytest.raises(err, match=what):
        train(tiny_model(), synthetic_batches(256, 2, 8), **args)


def test_bad_model_and_data():
    with pytest.raises(TypeError, match="nn.Module"):
        train("model", synthetic_batches(256, 2, 8), steps=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="data"):
        train(tiny_model(), 42, steps=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tuple"):
        train(tiny_model(), lambda s: torch.zeros(2, 8, dtype=torch.long), steps=1, progress=False)
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        bad = (torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 7, dtype=torch.long))
        train(tiny_model(), lambda s: bad, steps=1, progress=False)


# with the real SparseLinear (skipped where kernels.layers.sparse_linear is absent) -------------------


@pytest.mark.parametrize("mode", ["srste", "fst"])
def test_sparse_ffn_training_protocol(tmp_path, mode):
    pytest.importorskip("kernels.layers.sparse_linear")
    cfg = dataclasses.replace(TINY, ffn_mode=mode, n_layer=1)
    torch.manual_seed(0)
    model = build_gpt2(cfg)
    lin = ffn_linears(model)
    assert all(type(x).__name__ == "SparseLinear" and x.mode == mode for x in lin)
    log = tmp_path / "log.csv"
    res = train(model, synthetic_batches(TINY.vocab_size, 2, 16), steps=3, warmup=1, log_csv=log, progress=False)
    assert len(res.losses) == 3 and all(math.isfinite(v) for v in res.losses)
    flips = [r["flip_rate"] for r in read_log(log)]
    assert any(f != "" for f in flips)  # the modules report flip rates through the log
    assert all(0.0 <= float(f) <= 1.0 for f in flips if f != "")
    if mode == "fst":  # default dense_fraction 1/6: the last step switches the layers to dense
        assert all(x.is_dense for x in lin)


SPARSE_CFG = dataclasses.replace(TINY, d_model=32, n_head=2, n_layer=1, seq_len=16)  # small: masks run interpreted


def _sparse_run(ckpt: Path | None, model_seed: int = 0, **kw):
    """fc layers fst, proj layers weight24; mask refresh every 2 steps, dense after step 4 of 6."""
    from kernels.layers.sparse_linear import SparseLinear

    def make(i: int, o: int, bias: bool = True) -> nn.Module:
        mode = "fst" if o > i else "weight24"
        return SparseLinear(i, o, bias, mode=mode, mask_interval=2, dense_fraction=1 / 3)

    torch.manual_seed(model_seed)  # also draws the MVUE seeds: a resume must not depend on it
    model = build_gpt2(SPARSE_CFG, linear_factory=make)
    data = synthetic_batches(SPARSE_CFG.vocab_size, 2, 16, seed=11)
    res = train(model, data, steps=6, lr=3e-3, warmup=1, checkpoint_dir=ckpt, progress=False, **kw)
    return res, model


def test_sparse_resume_is_exact(tmp_path):
    """Checkpoint at step 3 (mask from step 2, not the current weights' mask) and at step 5 (dense
    phase); a resumed run in a model built from another seed must match the straight run bit for bit."""
    pytest.importorskip("kernels.layers.sparse_linear")
    straight, ref = _sparse_run(None, log_csv=tmp_path / "straight.csv")
    assert {x.mode for x in ffn_linears(ref)} == {"fst", "weight24"} and all(x.is_dense for x in ffn_linears(ref))
    ref_flips = [r["flip_rate"] for r in read_log(tmp_path / "straight.csv")]
    assert all(f != "" for f in ref_flips[:3])  # flip tracking in the sparse steps: its state must resume too
    names = sorted(n for n, m in ref.named_modules() if hasattr(m, "sparse_state_dict"))
    for stop_at in (3, 5):
        run = tmp_path / f"stop{stop_at}"
        log = run / "log.csv"
        first, _ = _sparse_run(run, stop_at=stop_at, log_csv=log)
        ckpt = load_checkpoint(run)
        assert sorted(ckpt["sparse"]) == names
        assert all(s["dense"] == (stop_at >= 4) for s in ckpt["sparse"].values())
        second, model = _sparse_run(run, model_seed=99, resume=True, log_csv=log)  # other weights, MVUE seeds
        assert second.start_step == stop_at and second.finished
        assert first.losses + second.losses == straight.losses, stop_at
        assert [r["flip_rate"] for r in read_log(log)] == ref_flips, stop_at
        got, want = model.state_dict(), ref.state_dict()
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), stop_at
        for a, b in zip(ffn_linears(model), ffn_linears(ref), strict=True):
            sa, sb = a.sparse_state_dict(), b.sparse_state_dict()
            assert sa.keys() == sb.keys()
            for k in sa:
                assert torch.equal(sa[k], sb[k]) if isinstance(sa[k], torch.Tensor) else sa[k] == sb[k], (stop_at, k)


def test_sparse_resume_refuses_mismatched_layers(tmp_path):
    pytest.importorskip("kernels.layers.sparse_linear")
    _sparse_run(tmp_path, stop_at=1)
    data = synthetic_batches(SPARSE_CFG.vocab_size, 2, 16, seed=11)
    kw = dict(steps=6, lr=3e-3, warmup=1, checkpoint_dir=tmp_path, resume=True, progress=False)
    # same parameters (load_state_dict alone would accept them), but no sparse layers
    with pytest.raises(ValueError, match="do not match.*in the checkpoint only: \\['h\\.0\\.mlp"):
        train(build_gpt2(SPARSE_CFG), data, **kw)
    # sparse layers of another mode
    with pytest.raises(ValueError, match="mode='srste'.*mode='fst'"):
        train(build_gpt2(dataclasses.replace(SPARSE_CFG, ffn_mode="srste")), data, **kw)
    # a checkpoint without sparse state (as written before it was saved) for a sparse model
    path = tmp_path / CHECKPOINT_NAME
    old = torch.load(path, weights_only=True)
    del old["sparse"]
    torch.save(old, path)
    with pytest.raises(ValueError, match="no sparse-layer state"):
        _sparse_run(tmp_path, resume=True)
