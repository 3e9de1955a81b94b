"""The pivot_comm suite's smoke profile in-process on the CPU (gloo ranks), as `repro run` does it."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from repro.results import ResultSet, read_results
from repro.roofline import measure_ceilings
from repro.suite import RunContext
from suites import pivot_comm


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    mp = pytest.MonkeyPatch()
    mp.setenv("REPRO_RESULTS_DIR", str(root))
    try:
        device = torch.device("cpu")
        results = ResultSet(pivot_comm.NAME, pivot_comm.ARTIFACT, "smoke", device, command="test")
        ceilings = measure_ceilings(device, copy_mib=8, gemm_n=128)
        ctx = RunContext(pivot_comm.NAME, pivot_comm.ARTIFACT, device, "smoke", ceilings, results)
        pivot_comm.run(ctx)
        ctx.add_ceiling_rows()
        path = results.write()
    finally:
        mp.undo()
    return path, results.frame()


def _value(df: pd.DataFrame, method: str, world: int, metric: str) -> float:
    sel = df[(df["method"] == method) & (df["metric"] == metric) & df["shape"].str.startswith(f"{world}x")]
    assert len(sel) == 1, (method, world, metric)
    return float(sel["value"].iloc[0])


def test_rows(smoke):
    path, df = smoke
    assert path.parent.name == "cpu" and read_results(path)["verified"].all()
    timed = df[df["method"].isin(list(pivot_comm.METHODS))]
    worlds = sorted({int(s.split("x")[0]) for s in timed["shape"]})
    assert worlds == [1, 2, 4]
    n_total = 4 * 64 * 64 + 3 * 64 * 256
    for world in worlds:
        (shape,) = set(timed[timed["shape"].str.startswith(f"{world}x")]["shape"])
        assert set(timed[timed["shape"] == shape]["variant"]) == {f"world={world}"}
        assert int(shape.split("x")[1]) * world == n_total
        for method in pivot_comm.METHODS:
            assert _value(df, method, world, "pivot_rel_err") == 0.0
            assert _value(df, method, world, "time") > 0
            assert _value(df, method, world, "rounds") >= 1
        assert _value(df, "exact", world, "bytes_communicated") >= 4 * n_total
        assert _value(df, "exact", world, "bytes_ratio_vs_allgather") == 1.0
    assert _value(df, "gaussian", 2, "bytes_ratio_vs_allgather") > 1
    assert _value(df, "radix", 2, "bytes_ratio_vs_allgather") > 1
    assert set(timed[timed["metric"] == "time"]["timer"]) == {"cpu-perf_counter"}


def test_compare_and_plot(smoke, tmp_path, capsys):
    _, df = smoke
    table = pivot_comm.compare(df)
    assert "paper: qualitative (Fig. 2b)" in capsys.readouterr().out
    assert len(table) == 9 and set(table["method"]) == set(pivot_comm.METHODS)
    assert (table["pivot_rel_err"] == 0).all() and table["bytes"].gt(0).all()
    paths = pivot_comm.plot(df, tmp_path / "pivot_comm")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in paths)


def test_full_profile_sizes():
    # H100 80 GB: 10 Llama-2 13B blocks (3.17e9 values); a block's shards split evenly at 1, 2, 4, 8
    assert pivot_comm.block_values(5120, 13824) == 317_194_240
    assert pivot_comm.full_blocks(80 * 2**30) == 10
    assert pivot_comm.full_blocks(1 << 30) == 1
    for world in (1, 2, 4, 8):
        shapes = pivot_comm.shard_shapes(5120, 13824, world)
        assert sum(r * c for r, c in shapes) * world == pivot_comm.block_values(5120, 13824)
