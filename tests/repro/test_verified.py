"""What ``verified`` and the staleness line stand on: the timed call's own output is checked after
timing (a call that does not recompute its output fails), each suite lists its checks, a suite's
inputs are the files behind its numbers, and results older than that code say so."""

from __future__ import annotations

import pytest
import torch

from repro.deps import suite_sources
from repro.results import ResultSet
from repro.roofline import Ceilings
from repro.staleness import number_sources, staleness
from repro.suite import CorrectnessError, RunContext, poison
from suites import SUITES, get_suite


def _ctx() -> RunContext:
    dev = torch.device("cpu")
    return RunContext("t", "t", dev, "smoke", Ceilings(1.0, 1.0, "float32", 1, 1), ResultSet("t", "t", "smoke", dev))


def test_poison_changes_every_element():
    b = torch.tensor([True, False, True])
    f = torch.randn(5)
    i = torch.arange(4)
    poison([b, (f,), {"i": i}])
    assert b.tolist() == [False, True, False]
    assert torch.isnan(f).all()
    assert (i == ~torch.arange(4)).all()


def test_time_checked_passes_a_call_that_recomputes_its_output():
    x = torch.randn(64)
    t = _ctx().time_checked(lambda: x * 2, lambda out: torch.equal(out, x * 2), "double")
    assert t.ms > 0


def test_time_checked_fails_a_call_that_leaves_its_output_alone():
    """A call whose output buffer is computed once and then only returned (as a broken graph
    replay would) keeps the poison, and the check after timing stops the run."""
    x = torch.randn(64)
    cached = x * 2

    def stale() -> torch.Tensor:
        return cached

    with pytest.raises(CorrectnessError, match="timed call"):
        _ctx().time_checked(stale, lambda out: torch.equal(out, x * 2), "stale")


def test_time_checked_fails_a_wrong_result():
    x = torch.randn(64)
    with pytest.raises(CorrectnessError, match="wrong"):
        _ctx().time_checked(lambda: x * 3, lambda out: torch.equal(out, x * 2), "wrong")


@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_names_its_checks(suite):
    checks = get_suite(suite).CHECKS
    assert checks and all(isinstance(c, str) and c for c in checks)


def test_suite_sources_follow_imports_but_not_package_reexports():
    t3 = suite_sources("table3")
    assert "kernels/ops/geglu.py" in t3 and "suites/table3.py" in t3
    assert "kernels/ops/flex.py" not in t3  # kernels/__init__ imports it, table3 does not
    for suite in ("figure6", "table8"):
        src = suite_sources(suite)
        assert {"repro/models/gpt2.py", "suites/_training_bench.py", "kernels/layers/sparse_linear.py"} <= set(src)
    # a name a package re-exports leads to the module that defines it: the training suites import
    # the trainer as `from repro.train import ensure_run` and once depended on none of it
    for suite in ("table5", "figure1"):
        assert {"repro/train/loop.py", "repro/train/step.py", "repro/models/gpt2.py"} <= set(suite_sources(suite))
    assert "repro/plots.py" not in suite_sources("figure6")  # draws numbers, makes none
    assert "suites/__init__.py" not in suite_sources("table2")  # the registry: a new suite re-runs no other
    with pytest.raises(ValueError, match="no suite module"):
        suite_sources("nope")
    # the task configs and smoke sets the evaluation reads are inputs too (an edited yaml re-ran nothing)
    evals = set(suite_sources("fast_table1"))
    assert "repro/eval/tasks/piqa_offline.yaml" in evals and "repro/eval/smoke_sets/glue_sst2.jsonl" in evals
    assert not any(f.startswith("repro/eval/") for f in suite_sources("table3"))


def test_recording_code_does_not_make_results_stale():
    assert "repro/results.py" not in number_sources("table3")
    assert all(not p.endswith("__init__.py") for p in number_sources("figure6"))


def test_staleness_at_head_is_fresh_and_unknown_commits_claim_nothing():
    from repro.provenance import git

    head = git("rev-parse", "HEAD")
    if not head:
        pytest.skip("not a git checkout")
    assert not staleness("table3", head).stale and staleness("table3", head).known
    assert staleness("table3", head + "-dirty").known
    for bad in ("unknown", "", "0" * 40):
        s = staleness("table3", bad)
        assert not s.known and not s.stale and "unknown" in s.sentence()


def test_staleness_names_the_commit_that_changed_the_code():
    from repro.provenance import git

    # the first commit that touched suites/table3.py is older than its latest change
    first = git("log", "--reverse", "--format=%H", "--", "suites/table3.py").split("\n")[0]
    last = git("log", "-1", "--format=%H", "--", "suites/table3.py")
    if not first or first == last:
        pytest.skip("needs the git history of suites/table3.py")
    s = staleness("table3", first)
    assert s.stale and s.changed_by and "STALE" in s.sentence()


def test_a_change_and_its_revert_leave_results_fresh():
    """f618e97 edited suites/table8.py and af4b021 reverted it: rows measured at 8521e84 (before
    both) stay fresh, since staleness looks at the net change of the code behind the numbers."""
    from repro.provenance import git
    from repro.staleness import _newest_change

    sha = "8521e848d226f194a391ad015a57601ea78dfe69"
    if not git("rev-parse", "--verify", "--quiet", "af4b021^{commit}"):
        pytest.skip("needs this repository's history")
    paths = list(number_sources("table8"))
    assert git("log", "--format=%h", f"{sha}..af4b021", "--", "suites/table8.py"), "the edit and its revert"
    # judged at af4b021 (fixed history, whatever came later): no net change, so fresh
    assert _newest_change("table8", paths, sha, head="af4b021") == ""
    assert _newest_change("table8", paths, sha, head="f618e97") != "", "the edit alone does change it"


SUITE_SRC = '''
"""A suite."""
import math

SCALE = 2.0


def _shared(x):
    return x * SCALE


def _measure(x):
    """How it measures."""
    return _shared(x) + 1


def run(ctx):
    ctx.add(_measure(3))


def _table(df):
    return _shared(len(df))


def compare(df):
    return _table(df)


def plot(df, stem):
    return []
'''


def _edit(old: str, new: str) -> str:
    assert old in SUITE_SRC
    return SUITE_SRC.replace(old, new)


def test_measured_part_ignores_the_report_and_docstrings_only():
    """A suite module's report (compare, plot, verdict, summary and what only they reach) and its
    docstrings change no number: editing them leaves the measured part equal; editing anything
    ``run`` reaches, a helper shared with the report, a constant or an import does not."""
    from repro.staleness import measured_part

    base = measured_part(SUITE_SRC)
    same = [
        _edit("return _table(df)", "return _table(df) + 1"),  # compare
        _edit("return _shared(len(df))", "return 2 * _shared(len(df))"),  # reached by compare only
        _edit('"""How it measures."""', '"""How it measures, said better."""'),  # a docstring
        _edit('"""A suite."""', '"""Another suite."""'),
        _edit("def plot(df, stem):\n    return []", "def plot(df, stem):\n    # a comment\n    return [stem]"),
    ]
    for src in same:
        assert measured_part(src) == base
    changed = [
        _edit("return _shared(x) + 1", "return _shared(x) + 2"),  # the run path
        _edit("return x * SCALE", "return x * SCALE * 2"),  # shared by run and compare: measured
        _edit("SCALE = 2.0", "SCALE = 3.0"),  # a constant, whoever reads it
        _edit("import math", "import cmath"),
        _edit("ctx.add(_measure(3))", "ctx.add(_measure(4))"),
    ]
    for src in changed:
        assert measured_part(src) != base


def test_code_part_ignores_comments_formatting_and_docstrings_only():
    """In any module, comments, formatting and docstrings change no number: editing them leaves the
    code part equal; editing a statement, a constant or a string that is not a docstring does not."""
    from repro.staleness import code_part

    base = code_part(SUITE_SRC)
    for src in (
        _edit('"""A suite."""', '"""Another suite."""'),
        _edit('"""How it measures."""', '"""How it measures, said better."""'),
        _edit("SCALE = 2.0", "SCALE = 2.0  # a comment"),
        _edit("SCALE = 2.0", "SCALE = (\n    2.0\n)"),
    ):
        assert code_part(src) == base
    for src in (
        _edit("SCALE = 2.0", "SCALE = 3.0"),
        _edit("return _table(df)", "return _table(df) + 1"),  # even a report: the suite rule decides those
        _edit("import math", "import cmath"),
    ):
        assert code_part(src) != base


def test_a_comment_only_change_leaves_results_fresh():
    """The comment and docstring edit of kernels/ops/_pivot_triton.py after a52a6c1 (figure3's
    results commit) leaves figure3 fresh when judged at that edit; the change before it does not."""
    from repro.provenance import git
    from repro.staleness import _newest_change

    edit = git("log", "-1", "--format=%H", "--grep=^_pivot_triton.py: comments and docstring only", "HEAD")
    if not edit:
        pytest.skip("needs this repository's history")
    paths = list(number_sources("figure3"))
    assert _newest_change("figure3", paths, "a52a6c1", head=edit) == ""
    assert _newest_change("figure3", paths, "e21995d", head=edit) != ""


def test_the_commit_named_is_a_code_change_not_a_later_report_edit():
    """figure3's H100 rows (ff83d00) went stale with kernel changes, the newest 16c2f36; 748a14a later
    edited only figure3's plot. Judged at 748a14a the rows are stale, and the commit named is
    16c2f36: the plot edit touched a file behind the numbers but changed none of them."""
    from repro.provenance import git
    from repro.staleness import _newest_change

    if not git("rev-parse", "--verify", "--quiet", "748a14a^{commit}"):
        pytest.skip("needs this repository's history")
    paths = list(number_sources("figure3"))
    assert git("log", "-1", "--format=%h", "ff83d00..748a14a", "--", *paths).startswith("748a14a")
    assert _newest_change("figure3", paths, "ff83d00", head="748a14a").startswith("16c2f36")


def test_a_report_only_change_leaves_results_fresh():
    """Between campaign be79020 and 9ab851b only fast_figure3_e2e's report changed (the scaling rows,
    summary and verdict): the measured part of the suite module is the same at both commits,
    while the first version of the module differs (a run-path change)."""
    from repro.provenance import git
    from repro.staleness import measured_part

    sha, report_only = "be790206cb67b18d8cdef6f9c69c52eecb6b4eac", "9ab851b"
    path = "suites/fast_figure3_e2e.py"
    if not git("rev-parse", "--verify", "--quiet", f"{report_only}^{{commit}}"):
        pytest.skip("needs this repository's history")
    assert git("diff", "--name-only", sha, report_only, "--", *number_sources("fast_figure3_e2e")).split() == [path]
    at = lambda c: measured_part(git("show", f"{c}:{path}"))  # noqa: E731
    assert at(sha) == at(report_only)
    first = git("log", "--reverse", "--format=%H", "--", path).split("\n")[0]
    assert at(first) != at(sha)


def test_ceiling_rows_carry_each_measurements_own_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GEMM ceiling row carried the copy's timer (eager), though the GEMM is graph-timed."""
    import repro.roofline as roofline
    from repro.timing import Timing

    def fake(fn, device, graph: bool = True, **kw):  # noqa: ANN001, ANN202
        fn()
        return Timing(ms=1.0, timer="graph" if graph else "eager", reps=1)

    monkeypatch.setattr(roofline, "time_fn", fake)
    c = roofline.measure_ceilings(torch.device("cpu"), copy_mib=1, gemm_n=16)
    dev = torch.device("cpu")
    ctx = RunContext("t", "t", dev, "smoke", c, ResultSet("t", "t", "smoke", dev))
    ctx.add_ceiling_rows()
    timer = {r.metric: r.timer for r in ctx.results.frame().itertuples()}
    assert timer == {"copy_bandwidth": "eager", "gemm_rate": "graph"}


def test_progress_lines_come_from_rank_0_only(monkeypatch, capsys) -> None:
    """Under torchrun every rank runs the suite: only rank 0 prints progress (they ran together)."""
    ctx = _ctx()
    monkeypatch.setenv("RANK", "1")
    ctx.log("from rank 1")
    monkeypatch.setenv("RANK", "0")
    ctx.log("from rank 0")
    err = capsys.readouterr().err
    assert "from rank 0" in err and "from rank 1" not in err


def test_progress_numbers_keep_two_significant_figures_below_ten() -> None:
    from repro.suite import num

    assert [num(v) for v in (0.0085, 0.93, 7.4, 10.4, 2113.0)] == ["0.0085", "0.93", "7.4", "10", "2113"]
