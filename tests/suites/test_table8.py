"""suites.table8: the measurement in rounds (medians, ratio of medians, per-round ranges) with
scripted times, and the compare table built from stored rows."""

from __future__ import annotations

import pandas as pd
import pytest

from suites import table8
from suites._training_bench import round_summary
from tests.helpers import ScriptedCtx, result_frame

# (step ms, refresh ms) per round and mode; fst and weight24 refresh their masks every 40 steps
_OTHERS = {"fst_all": (7.5, 80.0), "fst_compiled": (7.0, 40.0), "fst_all_compiled": (6.5, 80.0)}
_ROUNDS = [
    {"dense": (10.0, 0.0), "fst": (8.0, 40.0), "weight24": (9.0, 40.0), "srste": (10.0, 0.0), "half": (7.0, 0.0)},
    {"dense": (12.0, 0.0), "fst": (8.0, 40.0), "weight24": (9.0, 40.0), "srste": (10.0, 0.0), "half": (7.0, 0.0)},
    {"dense": (11.0, 0.0), "fst": (9.0, 40.0), "weight24": (9.0, 40.0), "srste": (10.0, 0.0), "half": (8.0, 0.0)},
]
# the compiled dense step: faster than eager dense in rounds 1 and 3, slower in round 2
_DENSE_COMPILED = [9.0, 12.5, 8.0]
_ROUNDS = [{**r, **_OTHERS, "dense_compiled": (d, 0.0)} for r, d in zip(_ROUNDS, _DENSE_COMPILED, strict=True)]
RUNS = ["dense", "fst", "weight24", "srste", "half", "fst_all", "dense_compiled", "fst_compiled", "fst_all_compiled"]


@pytest.fixture
def scripted_modes(monkeypatch):
    """table8._time_mode replaced by the script above (the real one builds, checks and times a
    model: the workflow test runs it through the smoke profile); returns the calls made."""
    calls: list[tuple[str, bool]] = []
    rounds = iter(range(len(_ROUNDS) * len(RUNS)))

    def fake(ctx, cfg, mode, tokens, targets, shape, check):  # noqa: ANN001, ANN202
        calls.append((mode, check))
        step, refresh = _ROUNDS[next(rounds) // len(RUNS)][mode]
        return step, refresh, 40, "scripted", (30.0 if mode.endswith("_compiled") else float("nan"))

    monkeypatch.setattr(table8, "_time_mode", fake)
    return calls


def _measure(rounds: int) -> ScriptedCtx:
    ctx = ScriptedCtx([])
    table8._measure(ctx, "smoke-tiny", table8.SMOKE_CFG, 2, table8.SMOKE_CFG.seq_len, rounds=rounds)
    return ctx


def test_measure_rounds_report_medians_and_ranges(scripted_modes):
    ctx = _measure(3)
    assert scripted_modes == [(m, r == 0) for r in range(3) for m in RUNS]  # rebuilt every round, checked once
    got = ctx.values()
    assert got["fst", "mask_refresh_time"] == 40.0
    assert got["fst", "step_time"] == 8.0
    assert got["fst", "step_time_amortized"] == 9.0  # median of 8 + 40/40, 8 + 1, 9 + 1
    assert got["dense", "step_time_amortized"] == 11.0
    assert got["dense", "step_time_amortized_min"] == 10.0 and got["dense", "step_time_amortized_max"] == 12.0
    assert got["fst", "speedup_vs_dense"] == pytest.approx(11.0 / 9.0)  # ratio of the medians
    assert got["fst", "speedup_vs_dense_min"] == pytest.approx(11.0 / 10.0)  # round 3
    assert got["fst", "speedup_vs_dense_max"] == pytest.approx(12.0 / 9.0)  # round 2
    assert got["half", "speedup_vs_dense"] == pytest.approx(11.0 / 7.0)
    assert got["half", "tokens_per_s"] == pytest.approx(2 * table8.SMOKE_CFG.seq_len / 7e-3)
    assert "fst 1.222x [1.10-1.33]" in ctx.msg


def test_headline_is_against_the_faster_dense_step_per_round(scripted_modes):
    """Per round the faster of dense (10, 12, 11) and dense_compiled (9, 12.5, 8): 9, 12, 8,
    median 9; fst amortized 9, 9, 10 (median 9): 1.0x vs the best dense step, 1.222x vs eager."""
    got = _measure(3).values()
    assert got["fst", "speedup_vs_best_dense"] == pytest.approx(9.0 / 9.0)
    assert got["fst", "speedup_vs_dense"] == pytest.approx(11.0 / 9.0)
    assert got["fst_compiled", "speedup_vs_best_dense"] == pytest.approx(9.0 / 8.0)  # 7 + 40/40
    assert got["fst_compiled", "speedup_vs_best_dense_min"] == pytest.approx(8.0 / 8.0)  # round 3
    assert got["dense_compiled", "speedup_vs_dense"] == pytest.approx(11.0 / 9.0)
    assert got["fst_all_compiled", "speedup_vs_best_dense"] == pytest.approx(9.0 / 8.5)  # 6.5 + 80/40
    assert got["fst_compiled", "compile_time"] == 30.0 and ("fst", "compile_time") not in got
    assert ("dense", "speedup_vs_best_dense") not in got


def test_eager_only_without_compiled_runs(scripted_modes, monkeypatch):
    monkeypatch.setenv("REPRO_COMPILED", "0")
    monkeypatch.setattr(table8, "_time_mode", lambda *a, **k: (10.0, 0.0, 40, "t", float("nan")))
    got = _measure(1).values()
    assert not any(m.endswith("_compiled") for m, _ in got)
    assert got["fst", "speedup_vs_dense"] == 1.0
    assert not any(metric.startswith("speedup_vs_best_dense") for _, metric in got)  # no best dense timed


def test_no_headline_when_the_compiled_dense_step_ran_out_of_memory(scripted_modes, monkeypatch):
    """With dense_compiled out of memory the headline was still written, against eager dense alone
    (here 1.25x where the compiled dense step would give 0.875x)."""
    real = table8._time_mode

    def fake(ctx, cfg, mode, *a, **k):  # noqa: ANN001, ANN202
        return None if mode == "dense_compiled" else real(ctx, cfg, mode, *a, **k)

    monkeypatch.setattr(table8, "_time_mode", fake)
    ctx = ScriptedCtx([])
    table8._measure(ctx, "smoke-tiny", table8.SMOKE_CFG, 2, table8.SMOKE_CFG.seq_len, rounds=1)
    got = ctx.values()
    assert ("fst", "speedup_vs_dense") in got
    assert not any(metric.startswith("speedup_vs_best_dense") for _, metric in got)
    assert got["dense_compiled", "out_of_memory"] == 0.0  # the mode left out says so in a row


def test_a_ratio_needs_both_sides_timed_alike(scripted_modes, monkeypatch):
    """One timer label was written on every mode (the last mode's), and a speedup could divide a
    graph replay's time by an uncaptured launch's after a capture broke mid-run."""
    real = table8._time_mode

    def fake(ctx, cfg, mode, *a, **k):  # noqa: ANN001, ANN202
        got = real(ctx, cfg, mode, *a, **k)
        return (*got[:3], "uncaptured" if mode == "half" else "graph", got[4])

    monkeypatch.setattr(table8, "_time_mode", fake)
    ctx = ScriptedCtx([])
    table8._measure(ctx, "smoke-tiny", table8.SMOKE_CFG, 2, table8.SMOKE_CFG.seq_len, rounds=1)
    timer = {(r["method"], r["metric"]): r.get("timer") for r in ctx.rows}
    assert timer["dense", "step_time"] == "graph" and timer["half", "step_time"] == "uncaptured"
    assert ("half", "speedup_vs_dense") not in timer and ("half", "speedup_vs_best_dense") not in timer
    assert timer["fst", "speedup_vs_dense"] == "graph"


def test_single_round_has_no_range_rows(scripted_modes):
    ctx = _measure(1)
    assert not any(r["metric"].endswith(("_min", "_max")) for r in ctx.rows)
    assert ctx.values()["fst", "speedup_vs_dense"] == pytest.approx(10.0 / 9.0)


def test_round_summary_rejects_uneven_rounds():
    with pytest.raises(ValueError, match="same number"):
        round_summary({"dense": [1.0, 2.0], "fst": [1.0]})
    with pytest.raises(ValueError, match="baseline"):
        round_summary({"fst": [1.0]})


def test_compare_carries_ranges_and_paper():
    shape = "gpt2-774m/N=5/seq=1024"
    rows = [
        ("dense", "step_time_amortized", 93.0),
        ("fst", "speedup_vs_dense", 1.05),
        ("fst", "speedup_vs_dense_min", 1.03),
        ("fst", "speedup_vs_dense_max", 1.06),
        ("fst", "gemm_ceiling_speedup", 1.08),
        ("half", "speedup_vs_dense", 1.25),
    ]
    rows.append(("fst_compiled", "speedup_vs_best_dense", 1.04))
    r = table8.compare(result_frame(shape, rows)).iloc[0]
    assert r["fst_compiled_vs_best_dense"] == 1.04
    assert (r["fst_speedup"], r["fst_speedup_min"], r["fst_speedup_max"]) == (1.05, 1.03, 1.06)
    assert (r["fst_gemm_ceiling"], r["dense_ms"], r["half_speedup"]) == (1.08, 93.0, 1.25)
    assert r["paper_fst_speedup (RTX 3090)"] == 1.2  # Table 8: 774M at batch 5


def test_a_mode_out_of_memory_is_left_out(monkeypatch):
    def fake(ctx, cfg, mode, tokens, targets, shape, check):  # noqa: ANN001, ANN202
        return None if mode == "srste" else ({"dense": 10.0}.get(mode, 8.0), 0.0, 40, "scripted", float("nan"))

    monkeypatch.setattr(table8, "_time_mode", fake)
    got = _measure(2).values()
    assert ("srste", "speedup_vs_dense") not in got and ("srste", "step_time") not in got
    assert got["fst", "speedup_vs_dense"] == pytest.approx(10.0 / 8.0)


def test_plot_adds_the_step_breakdown_panel(tmp_path):
    """With kernel_time rows (dense and fst of one shape) the figure gets a second panel."""
    from repro.kernel_profile import ORDER
    from suites import _kernel_breakdown as kbr

    shape = "gpt2-774m/N=5/seq=1024"
    rows = [{"shape": shape, "method": "fst", "metric": "speedup_vs_dense", "value": 1.05, "variant": ""}]
    for method, gemm in (("dense", 60.0), ("fst", 55.0)):

        def add(**kw: object) -> None:
            rows.append({"shape": shape, "variant": "", **kw})

        kbr.record(add, method, {c: (gemm if c == "GEMMs" else 1.0) for c in ORDER}, gemm + 15.0, "t")
    df = pd.DataFrame(rows).assign(device="nvidia-h100-80gb-hbm3", profile="full")
    paths = table8.plot(df, tmp_path / "t8")
    assert all(p.stat().st_size > 0 for p in paths)
    assert len(kbr.table(df)) == 2


def test_a_build_that_runs_out_of_memory_leaves_nothing_behind(monkeypatch):
    """An out-of-memory error inside a build is logged and the mode skipped, and the failed build's
    objects are freed before the next build, also when its traceback forms a reference cycle (as
    a frame that keeps the exception it raises does): on the H100 an uncollected failed build made
    every later mode of the shape fail."""
    import gc
    import weakref

    import torch

    held = []

    class Model:  # stands for the failed build's model, activations and graph pool
        pass

    def failing(cfg, mode, device):  # noqa: ANN001, ANN202
        model = Model()
        held.append(weakref.ref(model))
        try:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (scripted)")
        except torch.cuda.OutOfMemoryError as e:
            err = e  # frame -> err -> traceback -> frame: a cycle that holds ``model``
            raise err from None

    monkeypatch.setattr(table8, "_model", failing)
    gc.disable()  # only release_memory may collect
    try:
        ctx = ScriptedCtx([])
        got = table8._time_mode(ctx, table8.SMOKE_CFG, "fst", None, None, "smoke/N=2", check=True)
        assert got is None and "out of GPU memory, skipped" in ctx.msg
        assert held[0]() is None
    finally:
        gc.enable()


def test_ceiling_layers_of_one_shape_share_their_fixed_gradient_operand(monkeypatch):
    """The ceiling layer's fixed [out, tokens] 2:4 operand is made once per shape and shared by
    every layer of that shape, and lives only as long as a layer holds it."""
    import gc

    import torch

    import kernels.ops.sparse_gemm as sg
    from kernels.layers.gemm24 import _GRAD_OPERANDS, Gemm24Only

    made = []

    def pack(a, mask):  # noqa: ANN001, ANN202
        made.append(a.shape)
        return (a * mask).clone()

    monkeypatch.setattr(sg, "pack_operand", pack)
    a, b, c = Gemm24Only(64, 32), Gemm24Only(64, 32), Gemm24Only(32, 64)
    dy32, dy64 = torch.randn(128, 32).bfloat16(), torch.randn(128, 64).bfloat16()
    oa, ob, oc = a.grad_operand(dy32), b.grad_operand(dy32), c.grad_operand(dy64)
    assert oa is ob and oc is not oa and made == [(32, 128), (64, 128)]
    assert a.grad_operand(dy32) is oa and a.grad_operand(dy32[:64]) is not oa  # another token count
    assert len(_GRAD_OPERANDS) == 3
    del a, b, c, oa, ob, oc
    gc.collect()
    assert len(_GRAD_OPERANDS) == 0


def test_refresh_check_accepts_the_float32_search_on_a_tile_it_may_decide_either_way():
    """table8's mask-refresh check failed once (GPT-2 774M compiled). The layers refresh with
    ``checks=False`` (``check_finite=False``), the check's reference with ``check_finite=True``,
    which rescores in float64 the tiles holding a nonzero |w| <= 2**-18 x their max: on such a tile
    beside a float32 tie the two keep different, equally good (to float32) patterns. The check
    accepts that, and still refuses a wrong mask."""
    import torch

    from kernels import SparseLinear
    from kernels.ops.transposable import transposable_mask
    from suites.table8 import masks_match

    layer = SparseLinear(8, 4, mode="fst", checks=False, track_flip=False)
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[3, 3] = 1.0
        layer.weight[0, 0] = 1e-9  # tiny beside 1.0; the float32 scores tie
        layer.weight[:, 4:] = torch.tensor([[4.0, 3.0, 2.0, 1.0]]) * torch.arange(1, 5)[:, None]
    want = transposable_mask(layer.weight.detach(), method="exhaustive")
    layer.refresh_mask()
    got = layer.mask
    assert not torch.equal(got, want)  # the refresh and the reference disagree on the first tile
    assert masks_match(got, want, layer.weight)
    assert not masks_match(~got, want, layer.weight)  # the complement: transposable, keeps far less
    worse = got.clone()
    worse[:, 4:] = worse[:, 4:].flip(1)  # a transposable pattern that keeps less of the second tile
    assert not masks_match(worse, want, layer.weight)


def test_plan_splits_by_model_and_batch(monkeypatch):
    """REPRO_TABLE8_MODELS and REPRO_TABLE8_BATCHES split a full run into parts (one per GPU or
    machine start); a filter that keeps nothing, or a malformed one, is an error."""
    monkeypatch.setenv("REPRO_TABLE8_MODELS", "gpt2-774m")
    assert table8._plan("full") == {"gpt2-774m": (5, 23)}
    monkeypatch.setenv("REPRO_TABLE8_BATCHES", "23")
    assert table8._plan("full") == {"gpt2-774m": (23,)}
    monkeypatch.delenv("REPRO_TABLE8_MODELS")
    monkeypatch.setenv("REPRO_TABLE8_BATCHES", "16")
    assert table8._plan("full") == {"gpt2-124m": (16,), "gpt2-350m": (16,)}
    for bad in ("7", "16,x"):
        monkeypatch.setenv("REPRO_TABLE8_BATCHES", bad)
        with pytest.raises(ValueError, match="REPRO_TABLE8_BATCHES"):
            table8._plan("full")
