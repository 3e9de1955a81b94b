import csv
import io
import math
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from repro.provenance import device_slug
from repro.results import (
    DEVICE_SLUG_RE,
    PROFILES,
    RESULT_COLUMNS,
    ResultSet,
    check_device_slug,
    load_suite_results,
    read_results,
)


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


# --- issue 21: path escape, lost updates, file modes, corrupt rows -------------------------------

REPO = Path(__file__).resolve().parents[2]
FIXTURE_CSV = REPO / "tests" / "fixtures" / "dashboard" / "results" / "cpu" / "table2.csv"
COMMITTED_SUITES = ("table2", "table3", "figure3", "pivot_comm", "figure6", "table8")


def _fixture_lines() -> list[str]:
    return FIXTURE_CSV.read_text(encoding="utf-8").splitlines(keepends=True)


def _set_field(line: str, column: str, value: str) -> str:
    header = _fixture_lines()[0].rstrip("\n").split(",")
    cells = next(csv.reader([line]))
    cells[header.index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue()


@pytest.mark.parametrize("device", ["../../payload", "/tmp/payload", "cpu/../..", "", "CPU", "-x", "a b"])
def test_read_rejects_device_that_is_not_a_slug(tmp_path, device):
    lines = _fixture_lines()
    lines[3] = _set_field(lines[3], "device", device)
    p = tmp_path / "cpu" / "table2.csv"
    p.parent.mkdir()
    p.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(p))}.*line 4"):
        read_results(p)
    with pytest.raises(ValueError, match="line 4"):
        load_suite_results("table2", tmp_path)


@pytest.mark.parametrize("name", ["cpu", "nvidia-h100-80gb-hbm3", "nvidia-h200", "nvidia-geforce-rtx-4090"])
def test_device_slug_names_are_valid(name):
    assert DEVICE_SLUG_RE.fullmatch(name)
    assert check_device_slug(name) == name
    assert DEVICE_SLUG_RE.fullmatch(device_slug(torch.device("cpu")))


def test_result_path_refuses_escaping_device(tmp_path):
    rs = _rs("smoke", 1.0)
    for bad in ("../../payload", str(tmp_path / "abs"), ".."):
        rs.prov["device"] = bad
        with pytest.raises(ValueError, match="device"):
            rs.path(tmp_path)
        with pytest.raises(ValueError, match="device"):
            rs.write(tmp_path / "root")
    assert not (tmp_path / "abs").exists() and not (tmp_path / "root").exists()


def test_read_rejects_truncated_row(tmp_path):
    lines = _fixture_lines()
    header = lines[0].rstrip("\n").split(",")
    cells = next(csv.reader([lines[5]]))
    lines[5] = ",".join(cells[: header.index("value") + 1]) + "\n"  # ...,bandwidth,7.9: no unit, profile, device...
    p = tmp_path / "table2.csv"
    p.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(p))}.*line 6"):
        read_results(p)


@pytest.mark.parametrize("column", ["suite", "artifact", "method", "shape", "metric", "value", "profile", "device"])
def test_read_rejects_empty_required_field(tmp_path, column):
    lines = _fixture_lines()
    lines[2] = _set_field(lines[2], column, "")
    p = tmp_path / "table2.csv"
    p.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(p))}.*line 3.*{column}"):
        read_results(p)


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", "", "fast", "1_0", "1e999"])
def test_read_rejects_non_finite_value(tmp_path, value):
    lines = _fixture_lines()
    lines[7] = _set_field(lines[7], "value", value)
    p = tmp_path / "table2.csv"
    p.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(p))}.*line 8"):
        read_results(p)


@pytest.mark.parametrize("column,value", [("profile", "fast"), ("verified", "maybe"), ("verified", "")])
def test_read_rejects_bad_enum(tmp_path, column, value):
    lines = _fixture_lines()
    lines[2] = _set_field(lines[2], column, value)
    p = tmp_path / "table2.csv"
    p.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"line 3.*{column}"):
        read_results(p)


def test_read_allows_empty_optional_columns(tmp_path):
    lines = _fixture_lines()
    for col in ("variant", "timer", "unit"):
        lines[2] = _set_field(lines[2], col, "")
    p = tmp_path / "table2.csv"
    p.write_text("".join(lines), encoding="utf-8")
    df = read_results(p)
    assert len(df) == len(lines) - 1 and df.loc[1, "unit"] == ""


@pytest.mark.parametrize(
    "content",
    [b"", b"\n\n", b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe garbage", b'suite,artifact\n"unterminated,x\n'],
    ids=["empty", "blank", "binary", "garbled"],
)
def test_read_empty_or_garbled_names_the_file(tmp_path, content):
    p = tmp_path / "table2.csv"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(str(p))):
        read_results(p)


def test_read_rejects_extra_fields(tmp_path):
    lines = _fixture_lines()
    lines[4] = lines[4].rstrip("\n") + ",extra\n"
    p = tmp_path / "table2.csv"
    p.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(p))}.*line 5"):
        read_results(p)


def test_write_refuses_non_finite():
    rs = ResultSet("demo", "t", "smoke", torch.device("cpu"))
    for bad in (float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="finite"):
            rs.add("m", "1", "fp16", "time", bad, "ms", verified=True)


@pytest.mark.parametrize("suite", COMMITTED_SUITES)
def test_committed_results_still_load(suite):
    df = load_suite_results(suite, REPO / "results")
    assert not df.empty
    assert df["value"].map(math.isfinite).all()


def test_rewrite_keeps_mode_and_new_file_is_0644(tmp_path):
    old = os.umask(0o022)
    try:
        p = _rs("smoke", 1.0).write(tmp_path)
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
        os.chmod(p, 0o664)
        _rs("full", 2.0).write(tmp_path)
        assert stat.S_IMODE(p.stat().st_mode) == 0o664
        os.chmod(p, 0o600)
        _rs("smoke", 3.0).write(tmp_path)
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
        os.umask(0o077)
        q = ResultSet("other", "t", "smoke", torch.device("cpu"), command="test")
        q.add("m", "1", "fp16", "time", 1.0, "ms", verified=True)
        assert stat.S_IMODE(q.write(tmp_path).stat().st_mode) == 0o600  # 0644 & ~umask
    finally:
        os.umask(old)


_HAMMER = r"""
import sys, torch
from pathlib import Path
from repro.results import ResultSet, read_results
root, profile, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for i in range(n):
    rs = ResultSet("race", "t", profile, torch.device("cpu"), command="test")
    for k in range(150):
        rs.add(f"{profile}-{k}", "4x4", "fp16", "time", float(i), "ms", verified=True)
    p = rs.write(root)
    mine = read_results(p)
    mine = mine[mine["profile"] == profile]
    if len(mine) != 150 or set(mine["value"]) != {float(i)}:
        sys.exit(f"{profile}: lost update at write {i}: {len(mine)} rows, values {sorted(set(mine['value']))}")
"""


def test_concurrent_writers_lose_no_rows(tmp_path):
    """Two processes (smoke and full runs of one suite on one device) write the same file at once:
    every write keeps the other profile's rows and neither side's latest rows are lost."""
    n = 40
    env = {**os.environ, "PYTHONPATH": str(REPO), "REPRO_GIT_COMMIT": "test"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _HAMMER, str(tmp_path), prof, str(n)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for prof in PROFILES
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    df = read_results(tmp_path / "cpu" / "race.csv")
    for prof in PROFILES:
        part = df[df["profile"] == prof]
        assert len(part) == 150 and set(part["value"]) == {float(n - 1)}, prof
    assert not list((tmp_path / "cpu").glob(".*.tmp")), "temporary file left behind"
    assert sorted(f.name for f in (tmp_path / "cpu").iterdir()) == ["race.csv"], "lock file left behind"


def test_written_outputs_do_not_make_the_commit_dirty(tmp_path, monkeypatch):
    """Under Snakemake every GPU run recorded <sha>-dirty from a clean checkout: `tee` empties a
    tracked log, and the first suite's results and figures change tracked files before the next."""
    import subprocess

    import repro.provenance as prov

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for rel in ("code.py", "results/gpu/t.csv", "figures/gpu/t.svg", "logs/gpu/full/t.log"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("v1\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x")
    monkeypatch.setattr(prov, "REPO", tmp_path)
    monkeypatch.delenv("REPRO_GIT_COMMIT", raising=False)
    for rel in ("results/gpu/t.csv", "figures/gpu/t.svg", "logs/gpu/full/t.log"):
        (tmp_path / rel).write_text("")
    prov.git_commit.cache_clear()
    assert not prov.git_commit().endswith("-dirty")
    (tmp_path / "code.py").write_text("v2\n")
    prov.git_commit.cache_clear()
    assert prov.git_commit().endswith("-dirty")
    prov.git_commit.cache_clear()


def test_a_run_records_one_row_a_key():
    """Readers take one row per (method, variant, shape, dtype, metric): a second row of a key in one
    run hid one of the two values (last wins) without a word."""
    rs = ResultSet("t", "t", "smoke", torch.device("cpu"))
    rs.add("m", "4x4", "fp16", "time", 1.0, "ms", verified=True)
    rs.add("m", "4x4", "fp16", "time", 1.0, "ms", verified=True, variant="v2")  # another variant: its own key
    with pytest.raises(ValueError, match="already recorded in this run"):
        rs.add("m", "4x4", "fp16", "time", 2.0, "ms", verified=True)
    assert len(rs.rows) == 2


def test_the_recorded_command_carries_the_variables_that_choose_the_run(monkeypatch):
    """``REPRO_TABLE8_MODELS=gpt2-774m python -m repro run table8`` was recorded without its
    variable, so rerunning the command ran every model."""
    from repro.provenance import invocation

    monkeypatch.setattr("sys.argv", ["/x/repro/__main__.py", "run", "table8"])
    monkeypatch.setenv("REPRO_TABLE8_MODELS", "gpt2-774m")
    monkeypatch.setenv("FAST_E2E_EVERY", "10")
    monkeypatch.setenv("REPRO_GIT_COMMIT", "abc")  # where, not what: left out
    cmd = invocation()
    assert cmd.startswith("FAST_E2E_EVERY=10 REPRO_TABLE8_MODELS=gpt2-774m python -m repro run table8")
    assert "REPRO_GIT_COMMIT" not in cmd


def test_no_results_while_a_slowdown_is_planted(monkeypatch):
    """REPRO_PLANT_SLOWDOWN (the gate's A/B check) makes geglu read a third more bytes than its
    byte count says: a suite run under it wrote those rows as results."""
    import torch

    from repro.results import InputError, ResultSet

    monkeypatch.setenv("REPRO_PLANT_SLOWDOWN", "geglu")
    with pytest.raises(InputError, match="REPRO_PLANT_SLOWDOWN"):
        ResultSet("table3", "table3", "smoke", torch.device("cpu"))
