"""scripts/campaign_merge.py on a synthetic campaign tarball: every suite merged from all the job
folders that hold it (a journal of a job stopped early included, marked partial), finished runs
copied without checkpoints, logs and the gate's folders put in place, each job's end reported."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import torch

from repro.results import PARTIAL_MARK, ResultSet, read_results
from scripts.campaign_merge import main as campaign_merge


def _rows(root: Path, suite: str, shape: str, journal: bool) -> None:
    rs = ResultSet(suite, "A", "smoke", torch.device("cpu"))
    if journal:
        rs.start_journal(root)
    for m in ("a", "b"):
        rs.add("ours", shape, "fp32", m, 1.0, "ms", verified=True)
    if not journal:
        rs.write(root)


def _campaign(tmp: Path) -> Path:
    p = tmp / "src" / ".persist"
    _rows(p / "r" / "e2e-w1", "fast_figure3_e2e", "smoke w1", journal=False)
    _rows(p / "r" / "e2e-w2", "fast_figure3_e2e", "smoke w2", journal=True)  # stopped early
    run = p / "r" / "glue" / "cpu" / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "finished", "finished_at": "t1"}))
    (run / "model.pt").write_bytes(b"weights")
    stale = p / "r" / "glue-b" / "cpu" / "runs" / "r1"  # another job's copy of the stored, older run
    stale.mkdir(parents=True)
    (stale / "summary.json").write_text(json.dumps({"status": "finished", "finished_at": "t0"}))
    unfinished = p / "r" / "glue" / "cpu" / "runs" / "r2"
    unfinished.mkdir(parents=True)
    (unfinished / "summary.json").write_text(json.dumps({"status": "running"}))
    gate = p / "r" / "gate" / "results" / "benchmarks" / "cpu" / "gate-check"
    gate.mkdir(parents=True)
    (gate / "summary.json").write_text("{}")
    (p / "r" / "gate" / "aa_vs_committed.log").write_text("PASSED\n")
    logs = p / "queue" / "logs"
    logs.mkdir(parents=True)
    for name in ("e2e-w1", "e2e-w2", "gate"):
        (logs / f"{name}.log").write_text(f"log of {name}\n")
    states = [
        {"name": "e2e-w1", "state": "done", "rc": 0},
        {"name": "e2e-w2", "state": "done", "rc": 1},
        {"name": "glue", "state": "running"},
        {"name": "late", "state": "pending"},
        {"name": "w4", "state": "skipped", "reason": "needs 4 GPUs, the machine has 2"},
    ]
    (p / "queue" / "status.json").write_text(json.dumps(states))
    out = tmp / "campaign.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(p, arcname=".persist")
    return out


def test_campaign_merge_puts_everything_in_place(tmp_path: Path, capsys) -> None:
    into = tmp_path / "results"
    assert campaign_merge([str(_campaign(tmp_path)), "abc1234", "--into", str(into), "--no-plot"]) == 0
    df = read_results(into / "cpu" / "fast_figure3_e2e.csv")
    assert sorted(set(df["shape"])) == ["smoke w1", "smoke w2"]
    partial = df[df["shape"] == "smoke w2"]["command"]
    assert (
        partial.str.endswith(PARTIAL_MARK).all()
        and not df[df["shape"] == "smoke w1"]["command"].str.endswith(PARTIAL_MARK).any()
    )
    assert sorted(p.name for p in (into / "cpu" / "runs").iterdir()) == ["r1"]
    assert not (into / "cpu" / "runs" / "r1" / "model.pt").exists()
    assert json.loads((into / "cpu" / "runs" / "r1" / "summary.json").read_text())["finished_at"] == "t1"
    camp = into / "cpu" / "campaign-abc1234"
    assert sorted(p.name for p in camp.iterdir()) == [
        "e2e-w1.log",
        "e2e-w2-fast_figure3_e2e.smoke.partial",  # the cut job's journal, kept as it came
        "e2e-w2.log",
        "gate.log",
        "status.json",
    ]
    gate = into / "benchmarks" / "cpu" / "gate-abc1234"
    assert (gate / "gate-check" / "summary.json").exists() and (gate / "aa_vs_committed.log").exists()
    assert (gate / "gate_job.log").read_text() == "log of gate\n"
    out = capsys.readouterr().out
    for line in (
        "job e2e-w1: finished",
        "job e2e-w2: failed (exit 1)",
        "job glue: cut by",
        "job late: never started",
        "job w4: skipped (needs 4 GPUs, the machine has 2)",
    ):
        assert line in out, out


def test_a_campaign_without_suite_rows_keeps_its_logs_under_the_gpu_of_gpu_txt(tmp_path: Path) -> None:
    """GPU tests and the gate only (session 53): no suite rows name the device folder, so gpu.txt does;
    before, the logs went to results/results/ (a job folder's results/ taken for a device) or nowhere."""
    p = tmp_path / "src" / ".persist"
    tests = p / "r" / "gpu-tests"
    tests.mkdir(parents=True)
    (tests / "pytest.txt").write_text("115 passed\n")
    (tests / "junit.xml").write_text("<testsuites/>\n")
    gate = p / "r" / "gate" / "results" / "benchmarks" / "nvidia-h100-80gb-hbm3" / "gate-check"
    gate.mkdir(parents=True)
    (gate / "summary.json").write_text("{}")
    (p / "queue" / "logs").mkdir(parents=True)
    (p / "queue" / "logs" / "gpu-tests.log").write_text("log\n")
    (p / "queue" / "gpu.txt").write_text(
        "index, name, driver_version\n0, NVIDIA H100 80GB HBM3, 580.159.04\ntorch 2.11.0 triton 3.6.0\n"
    )
    tarball = tmp_path / "campaign.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(p, arcname=".persist")
    into = tmp_path / "results"
    assert campaign_merge([str(tarball), "abc1234", "--into", str(into), "--no-plot"]) == 0
    camp = into / "nvidia-h100-80gb-hbm3" / "campaign-abc1234"
    assert sorted(q.name for q in camp.iterdir()) == [
        "gpu-tests-junit.xml",
        "gpu-tests-pytest.txt",
        "gpu-tests.log",
        "gpu.txt",
    ]
    assert (camp / "gpu-tests-pytest.txt").read_text() == "115 passed\n"
    assert not (into / "results").exists()
    assert (into / "benchmarks" / "nvidia-h100-80gb-hbm3" / "gate-abc1234" / "gate-check" / "summary.json").exists()


def test_campaign_merge_refuses_a_member_outside_the_folder(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    evil = tmp_path / "evil.txt"
    evil.write_text("x")
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(evil, arcname="../evil.txt")
    with pytest.raises(SystemExit, match="refusing member"):
        campaign_merge([str(bad), "abc1234", "--into", str(tmp_path / "results"), "--no-plot"])


def test_a_cut_run_keeps_the_stored_rows_it_never_reached(tmp_path: Path, capsys) -> None:
    """A suite whose only job was cut (journal): a unit (here a shape) it re-measured whole replaces
    the stored one, a unit it did not finish keeps its stored rows whole, a unit not stored yet takes
    the journal's rows, marked partial. The GLUE sweep of campaign be79020 was cut after three of its
    five rows and had replaced the whole file; campaign dbcdbf1's table8 was cut 55 rows into GPT-2
    124M's 200, and a row-by-row merge would have set its new step times beside the stored speedups."""
    into = tmp_path / "results"
    stored = ResultSet("table8", "A", "smoke", torch.device("cpu"))
    for shape, metrics in (("s1", "ab"), ("s2", "abc")):
        for m in metrics:
            stored.add("ours", shape, "fp32", m, 0.0, "ms", verified=True)
    stored.write(into)
    p = tmp_path / "src" / ".persist"
    cut = ResultSet("table8", "A", "smoke", torch.device("cpu"))
    cut.start_journal(p / "r" / "t8")
    for shape in ("s1", "s2", "s3"):  # s1 whole, s2 cut before c, s3 new
        for m in "ab":
            cut.add("ours", shape, "fp32", m, 1.0, "ms", verified=True)
    (p / "queue").mkdir(parents=True)
    (p / "queue" / "status.json").write_text(json.dumps([{"name": "t8", "state": "running"}]))
    tarball = tmp_path / "c.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(p, arcname=".persist")
    sha = "be790206cb67b18d8cdef6f9c69c52eecb6b4eac"
    assert campaign_merge([str(tarball), sha, "--into", str(into), "--no-plot"]) == 0
    df = read_results(into / "cpu" / "table8.csv")
    got = {(r.shape, r.metric): (r.value, str(r.command).endswith(PARTIAL_MARK)) for r in df.itertuples()}
    assert got == {
        ("s1", "a"): (1.0, True),
        ("s1", "b"): (1.0, True),
        ("s2", "a"): (0.0, False),
        ("s2", "b"): (0.0, False),
        ("s2", "c"): (0.0, False),
        ("s3", "a"): (1.0, True),
        ("s3", "b"): (1.0, True),
    }
    out = capsys.readouterr().out
    assert "kept the stored rows of shape=s2: the cut run re-measured 2 of its 3 rows" in out, out
    assert "shape=s1" not in out and "shape=s3" not in out
    assert (into / "cpu" / "campaign-be79020" / "t8-table8.smoke.partial").exists()


def test_a_cut_glue_sweep_is_judged_by_method_and_variant(tmp_path: Path, capsys) -> None:
    """GLUE suites hold every run in one shape: their unit is a method and variant (one sweep's tasks
    and their mean), so a cut sweep replaces the variants it finished and no other."""
    from scripts.merge_results import merge

    into = tmp_path / "results"
    stored = ResultSet("hu_table7_glue", "A", "smoke", torch.device("cpu"))
    for variant in ("v1", "v2"):
        for m in ("sst2", "mrpc", "mean"):
            stored.add("ours", "s", "fp32", m, 0.0, "", verified=True, variant=variant)
    stored.write(into)
    cut = ResultSet("hu_table7_glue", "A", "smoke", torch.device("cpu"))
    cut.start_journal(tmp_path / "job")
    for variant, metrics in (("v1", ("sst2", "mrpc", "mean")), ("v2", ("sst2",))):
        for m in metrics:
            cut.add("ours", "s", "fp32", m, 1.0, "", verified=True, variant=variant)
    merge("hu_table7_glue", [tmp_path / "job"], into, partial=True)
    df = read_results(into / "cpu" / "hu_table7_glue.csv")
    assert df.groupby("variant")["value"].agg(set).to_dict() == {"v1": {1.0}, "v2": {0.0}}
    assert "kept the stored rows of method=ours, variant=v2, shape=s" in capsys.readouterr().out


def test_a_cut_run_that_finished_no_unit_changes_nothing(tmp_path: Path) -> None:
    """Campaign dbcdbf1's table8: cut inside its first model. The stored file stays as it was, the
    device ceilings too (the stored rows' shares of copy were computed against them)."""
    from scripts.merge_results import merge

    into = tmp_path / "results"
    stored = ResultSet("table8", "A", "smoke", torch.device("cpu"))
    stored.add("ceiling", "copy", "bf16", "copy_bandwidth", 3000.0, "GB/s", verified=False)
    for m in "abc":
        stored.add("ours", "s", "fp32", m, 0.0, "ms", verified=True)
    stored.write(into)
    before = (into / "cpu" / "table8.csv").read_text()
    cut = ResultSet("table8", "A", "smoke", torch.device("cpu"))
    cut.start_journal(tmp_path / "job")
    cut.add("ceiling", "copy", "bf16", "copy_bandwidth", 2900.0, "GB/s", verified=False)
    cut.add("ours", "s", "fp32", "a", 1.0, "ms", verified=True)
    merge("table8", [tmp_path / "job"], into, keep_other_shapes=True, partial=True)
    assert (into / "cpu" / "table8.csv").read_text() == before


def test_an_e2e_part_keeps_the_other_models_rows(tmp_path: Path) -> None:
    """fast_figure3_e2e runs in parts by model and world size (FAST_E2E_MODELS): a campaign that
    re-ran only the 460M parts replaces those rows and keeps the stored 7B rows (campaign 7e83969
    had dropped them before KEEP_OTHER_SHAPES named the suite)."""
    into = tmp_path / "results"
    stored = ResultSet("fast_figure3_e2e", "A", "smoke", torch.device("cpu"))
    for shape in ("smoke w1", "big w1"):
        stored.add("ours", shape, "fp32", "a", 0.0, "ms", verified=True)
    stored.write(into)
    p = tmp_path / "src" / ".persist"
    _rows(p / "r" / "e2e-w1", "fast_figure3_e2e", "smoke w1", journal=False)
    (p / "queue").mkdir(parents=True)
    (p / "queue" / "status.json").write_text(json.dumps([{"name": "e2e-w1", "state": "done", "rc": 0}]))
    tarball = tmp_path / "e.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(p, arcname=".persist")
    assert campaign_merge([str(tarball), "abc1234", "--into", str(into), "--no-plot"]) == 0
    df = read_results(into / "cpu" / "fast_figure3_e2e.csv")
    assert sorted(set(df["shape"])) == ["big w1", "smoke w1"]
    assert df[df["shape"] == "smoke w1"]["value"].tolist() == [1.0, 1.0]


def test_gate_jobs_keep_every_report_and_their_own_folder(tmp_path: Path) -> None:
    """Only two fixed file names were copied (gate_check.log and aa_vs_committed_<sha>.json were
    lost), and two gate jobs on one GPU kind wrote over each other's folder."""
    from scripts.campaign_merge import copy_gate

    persist = tmp_path / ".persist"
    for job, text in (("gate", "A"), ("rerun", "B")):
        bench = persist / "r" / job / "results" / "benchmarks" / "nvidia-h100" / "gate-check"
        bench.mkdir(parents=True)
        (bench / "summary.json").write_text(text)
        (persist / "r" / job / "gate_check.log").write_text(f"log {text}")
        (persist / "r" / job / "aa_vs_committed_c07e865.json").write_text(f"aa {text}")
        (persist / "r" / job / "model.pt").write_bytes(b"not a report")
    done = copy_gate(persist, "abc1234", tmp_path / "benchmarks")
    assert sorted(Path(d).name for d in done) == ["gate-abc1234-gate", "gate-abc1234-rerun"]
    for job, text in (("gate", "A"), ("rerun", "B")):
        dest = tmp_path / "benchmarks" / "nvidia-h100" / f"gate-abc1234-{job}"
        assert (dest / "gate-check" / "summary.json").read_text() == text
        assert (dest / "gate_check.log").read_text() == f"log {text}"
        assert (dest / "aa_vs_committed_c07e865.json").read_text() == f"aa {text}"
        assert not (dest / "model.pt").exists()
