"""A run stopped before its end keeps the rows it finished (``ResultSet.start_journal``): the CLI
keeps the journal when the run fails for any reason but a failed correctness check, removes it
when the run writes its results, and ``scripts/merge_results.py --partial`` merges it, marked."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

import suites.table2
from repro.cli import main as cli_main
from repro.results import PARTIAL_MARK, ResultSet, read_journal, read_results
from repro.roofline import Ceilings
from repro.suite import CorrectnessError

REPO = Path(__file__).resolve().parents[2]


def _merge_module():
    spec = importlib.util.spec_from_file_location("merge_results", REPO / "scripts" / "merge_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(results: ResultSet, n: int, shape: str = "s") -> None:
    for i in range(n):
        results.add("ours", shape, "fp32", f"m{i}", float(i) + 0.5, "ms", verified=True, variant="v,1")


def test_journal_holds_rows_as_added_and_goes_with_write(tmp_path: Path) -> None:
    rs = ResultSet("table2", "Table 2", "smoke", torch.device("cpu"))
    path = rs.start_journal(tmp_path)
    assert path == tmp_path / "cpu" / "table2.smoke.partial"
    _rows(rs, 3)
    got = read_journal(path)
    assert got["value"].tolist() == [0.5, 1.5, 2.5] and got["variant"].tolist() == ["v,1"] * 3
    assert got["command"].str.endswith(PARTIAL_MARK).all() and got["verified"].all()
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("table2,Table 2,ours,v")  # a line cut by a kill mid-write
    assert len(read_journal(path)) == 3
    rs.write(tmp_path)
    assert not path.exists() and len(read_results(tmp_path / "cpu" / "table2.csv")) == 3


def test_a_new_run_sets_an_earlier_journal_aside(tmp_path: Path) -> None:
    """A new run of the same suite and profile once overwrote the unmerged journal of a run that
    stopped early (its rows lost); now the earlier journal is moved aside, whole, and merges."""
    first = ResultSet("table2", "Table 2", "smoke", torch.device("cpu"))
    path = first.start_journal(tmp_path)
    _rows(first, 2)  # then the run is cut
    second = ResultSet("table2", "Table 2", "smoke", torch.device("cpu"))
    assert second.start_journal(tmp_path) == path and second.set_aside is not None
    assert second.set_aside.name.startswith("table2.smoke.") and second.set_aside.name.endswith(".partial")
    assert len(read_journal(second.set_aside)) == 2 and len(read_journal(path)) == 0
    third = ResultSet("table2", "Table 2", "smoke", torch.device("cpu"))
    third.start_journal(tmp_path)  # an empty journal (header alone) is simply replaced
    assert third.set_aside is None
    merged = _merge_module().merge("table2", [second.set_aside], tmp_path / "into", partial=True)
    assert len(read_results(merged)) == 2


@pytest.fixture
def stub_run(monkeypatch):
    """table2 through the CLI with no measuring: the ceilings are stubbed, the run is set per test."""
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))
    monkeypatch.setenv("REPRO_RESULTS_DIR", os.environ.get("REPRO_RESULTS_DIR", str(REPO / "results")))
    monkeypatch.setattr("repro.roofline.measure_ceilings", lambda device: Ceilings(1.0, 1.0, "fp32", 1, 1))

    def use(run):
        monkeypatch.setattr(suites.table2, "run", run)

    return use


def _cli(tmp_path: Path) -> int:
    return cli_main(["run", "table2", "--device", "cpu", "--results-dir", str(tmp_path), "--no-figure"])


def test_a_run_that_runs_out_of_memory_keeps_its_finished_rows(tmp_path: Path, capsys, stub_run) -> None:
    def run(ctx):
        _rows(ctx.results, 2)
        raise torch.OutOfMemoryError("CUDA out of memory (the next part)")

    stub_run(run)
    with pytest.raises(torch.OutOfMemoryError):
        _cli(tmp_path)
    journal = tmp_path / "cpu" / "table2.smoke.partial"
    assert len(read_journal(journal)) == 2 and not (tmp_path / "cpu" / "table2.csv").exists()
    assert "--partial" in capsys.readouterr().err

    merge = _merge_module()
    into = tmp_path / "store"
    with pytest.raises(SystemExit, match="--partial takes its journal"):
        merge.merge("table2", [tmp_path], into)
    out = read_results(merge.merge("table2", [tmp_path], into, keep_other_shapes=True, partial=True))
    assert len(out) == 2 and out["command"].str.endswith(PARTIAL_MARK).all()


def test_a_journal_beside_finished_results_merges_by_its_path(tmp_path: Path, capsys, stub_run) -> None:
    """The printed command works where the journal lies beside finished csvs of other devices
    (results/ itself): figure3 at 01a159e printed one that found two csvs and stopped."""
    other = ResultSet("table2", "Table 2", "smoke", torch.device("cpu"))
    _rows(other, 1, shape="old")
    other.prov["device"] = "another-gpu"
    other.write(tmp_path)

    def run(ctx):
        _rows(ctx.results, 2)
        raise RuntimeError("the lease ended")

    stub_run(run)
    with pytest.raises(RuntimeError):
        _cli(tmp_path)
    err = capsys.readouterr().err
    journal = tmp_path / "cpu" / "table2.smoke.partial"
    assert f"{journal} --partial --into {tmp_path}" in err
    merge = _merge_module()
    with pytest.raises(SystemExit, match="expected one"):
        merge.merge("table2", [tmp_path], tmp_path, partial=True)
    out = read_results(merge.merge("table2", [journal], tmp_path, partial=True))
    assert len(out) == 2 and out["command"].str.endswith(PARTIAL_MARK).all()
    assert len(read_results(tmp_path / "another-gpu" / "table2.csv")) == 1
    with pytest.raises(SystemExit, match="must be a journal"):
        merge.merge("table2", [tmp_path / "another-gpu" / "table2.csv"], tmp_path, partial=True)


def test_a_run_that_fails_a_check_keeps_nothing(tmp_path: Path, stub_run) -> None:
    def run(ctx):
        _rows(ctx.results, 2)
        ctx.check(False, "planted")

    stub_run(run)
    with pytest.raises(CorrectnessError):
        _cli(tmp_path)
    assert not any((tmp_path / "cpu").glob("*"))


def test_a_finished_run_leaves_no_journal(tmp_path: Path, stub_run) -> None:
    stub_run(lambda ctx: _rows(ctx.results, 2))
    assert _cli(tmp_path) == 0
    assert sorted(p.name for p in (tmp_path / "cpu").iterdir()) == ["table2.csv"]


def test_merged_rows_go_to_their_device_folder_not_the_parts_folder(tmp_path: Path, capsys) -> None:
    """A journal copied to ~/Downloads merged into results/Downloads/ (the folder was taken from the
    part's parent folder, not from the rows)."""
    rs = ResultSet("table2", "Table 2", "smoke", torch.device("cpu"))
    path = rs.start_journal(tmp_path / "run")
    _rows(rs, 2)
    moved = tmp_path / "Downloads" / path.name
    moved.parent.mkdir()
    moved.write_bytes(path.read_bytes())
    merge = _merge_module()
    out = merge.merge("table2", [moved], tmp_path / "results", partial=True)
    assert out == tmp_path / "results" / "cpu" / "table2.csv" and len(read_results(out)) == 2
    assert "its rows were measured on 'cpu'" in capsys.readouterr().out
    assert not (tmp_path / "results" / "Downloads").exists()
