"""A stale result a person reviewed (``results/reviews.csv``) says "stands by review" with the
reason, never "fresh"; the review covers changes up to its commit only, counts only from a later
commit than the results, and a malformed review file is an error naming the line."""

from __future__ import annotations

import pytest

from repro import staleness as st
from repro.provenance import git
from suites import SUITES


@pytest.fixture
def fake_reviews(monkeypatch):
    """Replace the review file's contents for one test (and forget cached answers both ways)."""

    def use(*reviews: st.Review) -> None:
        monkeypatch.setattr(st, "reviews", lambda path=st.REVIEWS: tuple(reviews))
        st.staleness.cache_clear()

    yield use
    st.staleness.cache_clear()


def _stale_result() -> tuple[str, str]:
    """A suite and an old commit whose results are stale (suites/table3.py changed since)."""
    first = git("log", "--reverse", "--format=%H", "--", "suites/table3.py").split("\n")[0]
    if not first or not st.staleness("table3", first).stale:
        pytest.skip("needs the git history of suites/table3.py")
    return "table3", first


def test_a_review_at_head_makes_a_stale_result_stand(fake_reviews):
    suite, old = _stale_result()
    fake_reviews(st.Review(suite, old[:10], git("rev-parse", "HEAD"), "the change is a rename"))
    s = st.staleness(suite, old)
    assert not s.stale and s.reviewed_at and s.changed_by
    assert "STANDS BY REVIEW" in s.sentence() and "the change is a rename" in s.sentence()
    assert not s.sentence().startswith("fresh")


def test_a_review_covers_changes_up_to_its_commit_only(fake_reviews):
    suite, old = _stale_result()
    # reviewed at the results' own commit: every later change to the code is unreviewed
    fake_reviews(st.Review(suite, old[:10], old, "reviewed before the change"))
    assert st.staleness(suite, old).stale


def test_a_review_from_before_the_results_does_not_count(fake_reviews):
    touched = git("log", "--reverse", "--format=%H", "--", "suites/table3.py").split("\n")
    if len(touched) < 3 or not st.staleness("table3", touched[1]).stale:
        pytest.skip("needs the git history of suites/table3.py")
    # results at the second change of the suite, "reviewed" at the first: not a later commit
    fake_reviews(st.Review("table3", touched[1][:10], touched[0], "older than the results"))
    assert st.staleness("table3", touched[1]).stale
    fake_reviews(st.Review("table3", touched[1][:10], git("rev-parse", "HEAD"), "a later review"))
    assert not st.staleness("table3", touched[1]).stale


def test_a_review_of_another_suite_or_commit_does_not_count(fake_reviews):
    suite, old = _stale_result()
    head = git("rev-parse", "HEAD")
    fake_reviews(st.Review("table2", old[:10], head, "x"), st.Review(suite, "0000000", head, "x"))
    assert st.staleness(suite, old).stale


@pytest.mark.parametrize(
    "text, match",
    [
        ("suite,commit,reviewed_at,reason\n", "header"),
        ("suite,results_commit,reviewed_at,reason\ntable3,abcdef1,abcdef2\n", ":2: expected 4"),
        ("suite,results_commit,reviewed_at,reason\ntable3,abcdef1,abcdef2, \n", ":2: expected 4"),
        ("suite,results_commit,reviewed_at,reason\ntable3,abc,abcdef2,why\n", ":2: commits"),
    ],
)
def test_a_malformed_review_file_is_an_error_naming_the_line(tmp_path, text, match):
    path = tmp_path / "reviews.csv"
    path.write_text(text)
    st.reviews.cache_clear()
    try:
        with pytest.raises(ValueError, match=match):
            st.reviews(str(path))
    finally:
        st.reviews.cache_clear()


def test_the_committed_reviews_name_known_suites_and_commits():
    st.reviews.cache_clear()
    found = st.reviews()
    for r in found:
        assert r.suite in SUITES, r
        if git("rev-parse", "HEAD"):  # a checkout with history: both commits exist, in order
            full = git("rev-parse", "--verify", "--quiet", f"{r.results_commit}^{{commit}}")
            at = git("rev-parse", "--verify", "--quiet", f"{r.reviewed_at}^{{commit}}")
            assert full and at and git("merge-base", full, at) == full, r
