import pandas as pd
import pytest
import torch

from repro.results import RESULT_COLUMNS, ResultSet, load_suite_results, read_results


def _rs(profile: str, value: float) -> ResultSet:
    rs = ResultSet("demo", "table2", profile, torch.device("cpu"), command="test")
    rs.add("m", "4x4", "fp16", "time", value, "ms", verified=True, timer="cpu-perf_counter")
    return rs


def test_write_merges_per_profile_and_keeps_provenance(tmp_path):
    p = _rs("smoke", 1.0).write(tmp_path)
    assert p == tmp_path / "cpu" / "demo.csv"
    _rs("full", 2.0).write(tmp_path)
    _rs("smoke", 3.0).write(tmp_path)  # replaces the smoke rows only
    df = read_results(p)
    assert list(df.columns) == list(RESULT_COLUMNS)
    assert sorted(df["value"]) == [2.0, 3.0]
    assert (df["command"] == "test").all() and (df["device"] == "cpu").all()
    assert df["git_commit"].str.len().gt(0).all() and df["torch_version"].eq(torch.__version__).all()
    assert not list(p.parent.glob(".*.tmp")), "temporary file left behind"


def test_devices_do_not_overwrite_each_other(tmp_path):
    _rs("smoke", 1.0).write(tmp_path)
    other = tmp_path / "nvidia-h100" / "demo.csv"
    other.parent.mkdir()
    df = read_results(tmp_path / "cpu" / "demo.csv").assign(device="nvidia-h100", value=9.0)
    df.to_csv(other, index=False)
    _rs("smoke", 5.0).write(tmp_path)
    assert read_results(other)["value"].tolist() == [9.0]
    assert sorted(load_suite_results("demo", tmp_path)["value"]) == [5.0, 9.0]


def test_refuses_nan_and_empty(tmp_path):
    rs = ResultSet("demo", "t", "smoke", torch.device("cpu"))
    with pytest.raises(ValueError, match="NaN"):
        rs.add("m", "1", "fp16", "time", float("nan"), "ms", verified=True)
    with pytest.raises(ValueError, match="no rows"):
        rs.write(tmp_path)
    with pytest.raises(ValueError, match="profile"):
        ResultSet("demo", "t", "fast", torch.device("cpu"))


def test_read_rejects_foreign_csv(tmp_path):
    p = tmp_path / "x.csv"
    pd.DataFrame({"a": [1]}).to_csv(p, index=False)
    with pytest.raises(ValueError, match="missing columns"):
        read_results(p)
