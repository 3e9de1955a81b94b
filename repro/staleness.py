"""Whether stored results are older than the code that produced them.

A row carries the commit it was measured at (``git_commit``). If a later commit changed the code
behind the suite's numbers (its module and what it imports from this repository, transitively:
:func:`number_sources`), the number may no longer describe what the code does today: the suite
pages and ``repro compare`` say so, naming that commit. Plotting, the dashboard, the paper data
and the results store produce no number, so changes to them leave results fresh. Outside a git
checkout nothing can be told (shown as unknown)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from repro.deps import suite_sources
from repro.provenance import git

RECORDING = frozenset({"repro/results.py", "repro/provenance.py"})
"""Code that stores and labels numbers but does not produce them: its changes leave results fresh."""


def number_sources(suite: str) -> tuple[str, ...]:
    """The files behind ``suite``'s numbers (:func:`repro.deps.suite_sources`) less the recording
    code and the package ``__init__`` files (which only re-export)."""
    return tuple(p for p in suite_sources(suite) if p not in RECORDING and not p.endswith("__init__.py"))


@dataclass(frozen=True)
class Staleness:
    """``commit``: the rows' commit; ``changed_by``: the newest later commit that changed the code
    behind the suite ("" where none did: fresh); ``known``: False outside git or for a commit git
    does not know (then nothing is claimed)."""

    commit: str
    changed_by: str
    known: bool

    @property
    def stale(self) -> bool:
        return self.known and bool(self.changed_by)

    def sentence(self) -> str:
        if not self.known:
            return f"freshness unknown (results from {self.commit[:10] or 'no commit'}; no git history here)"
        if self.stale:
            return (
                f"STALE: results from {self.commit[:10]}; the code behind them changed since "
                f"(commit {self.changed_by}): re-run the suite"
            )
        return f"fresh: results from {self.commit[:10]}; no change to the code behind them since"


@lru_cache(maxsize=64)
def staleness(suite: str, commit: str) -> Staleness:
    """Staleness of rows of ``suite`` measured at ``commit`` (a ``-dirty`` suffix is dropped: the
    committed part is compared)."""
    sha = commit.removesuffix("-dirty")
    if not sha or sha == "unknown" or not git("rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}"):
        return Staleness(commit, "", False)
    paths = list(number_sources(suite))
    # the net change, not every commit in between: a change and its revert leave results fresh
    changed = [p for p in git("diff", "--name-only", sha, "HEAD", "--", *paths).splitlines() if p]
    newer = git("log", "-1", "--format=%h", f"{sha}..HEAD", "--", *changed) if changed else ""
    return Staleness(commit, newer, True)


def frame_staleness(suite: str, df: pd.DataFrame) -> list[Staleness]:
    """One :class:`Staleness` per distinct commit of ``df``'s rows (most rows first)."""
    if df.empty or "git_commit" not in df:
        return []
    commits = df["git_commit"].astype(str).value_counts().index
    return [staleness(suite, c) for c in commits]
