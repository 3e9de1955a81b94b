"""Whether stored results are older than the code that produced them.

A row carries the commit it was measured at (``git_commit``). If a later commit changed the code
behind the suite's numbers (its module and what it imports from this repository, transitively:
:func:`number_sources`), the number may no longer describe what the code does today: the suite
pages and ``repro compare`` say so, naming that commit. Plotting, the dashboard, the paper data
and the results store produce no number, so changes to them leave results fresh. Inside the suite's
own module the same holds for its report: the functions the CLI and the dashboard call on stored
rows (:data:`REPORT_ENTRY_POINTS`) and the definitions only they reach; a change confined to them
leaves the rows fresh (:func:`measured_part`). In every file a change to comments, formatting or
docstrings alone leaves them fresh (:func:`code_part`). Outside a git checkout nothing can
be told (shown as unknown)."""

from __future__ import annotations

import ast
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


REPORT_ENTRY_POINTS = frozenset({"compare", "plot", "verdict", "summary"})
"""A suite module's functions that read stored rows to print, draw or judge them (never called by
``run``): they and the definitions only they reach change no number."""

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _strip_docstrings(node: ast.AST) -> ast.AST:
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        first = body[0] if isinstance(n, (*_DEFS, ast.Module)) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            n.body = body[1:] or [ast.Pass()]
    return node


def code_part(source: str) -> str:
    """A module's code as a normalised AST dump: comments, formatting and docstrings dropped, which
    change no number in any module."""
    return ast.dump(_strip_docstrings(ast.parse(source)))


def _same_code(path: str, sha: str, head: str) -> bool:
    """True when ``path`` (a Python file) differs between ``sha`` and ``head`` in comments,
    formatting or docstrings alone."""
    if not path.endswith(".py"):
        return False
    old, new = git("show", f"{sha}:{path}"), git("show", f"{head}:{path}")
    if not old or not new:
        return False
    try:
        return code_part(old) == code_part(new)
    except SyntaxError:
        return False


def measured_part(source: str) -> str:
    """The part of a suite module that can change its numbers, as a normalised AST dump (comments,
    formatting and docstrings dropped): every top-level statement but the report's. Report = the
    :data:`REPORT_ENTRY_POINTS` and the definitions reachable from them that nothing else reaches,
    where "else" is ``run``, every statement that is not a definition (imports, constants: kept
    whoever reads them) and every definition the entry points do not reach (the CLI or the workflow
    may call it). Conservative: a helper shared by ``run`` and ``compare`` counts as measured."""
    body = _strip_docstrings(ast.parse(source)).body
    names: dict[str, int] = {}
    for i, node in enumerate(body):
        if isinstance(node, _DEFS):
            names[node.name] = i
    refs = [{n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & names.keys() for node in body]

    def closure(start: set[int]) -> set[int]:
        seen, todo = set(start), list(start)
        while todo:
            for name in refs[todo.pop()]:
                j = names[name]
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen

    entries = closure({i for n, i in names.items() if n in REPORT_ENTRY_POINTS})
    roots = {i for i, node in enumerate(body) if not isinstance(node, _DEFS) or i not in entries}
    roots |= {names["run"]} if "run" in names else set()
    kept = closure(roots)
    return "\n".join(ast.dump(body[i]) for i in sorted(kept))


def _report_only_change(path: str, sha: str, head: str = "HEAD") -> bool:
    """True when ``path`` (a suite module) differs between ``sha`` and ``head`` in its report alone."""
    old, new = git("show", f"{sha}:{path}"), git("show", f"{head}:{path}")
    if not old or not new:
        return False
    try:
        return measured_part(old) == measured_part(new)
    except SyntaxError:
        return False


@dataclass(frozen=True)
class Staleness:
    """``commit``: the rows' commit; ``changed_by``: the newest later commit that changed the code
    behind the suite ("" where none did: fresh); ``known``: False outside git or for a commit git
    does not know (then nothing is claimed)."""

    commit: str
    changed_by: str
    known: bool
    reviewed_at: str = ""
    """A commit at which a person read the change and recorded why the numbers stand
    (:data:`REVIEWS`); "" where none did. Only a review no later change to the code follows counts."""
    reason: str = ""

    @property
    def stale(self) -> bool:
        return self.known and bool(self.changed_by) and not self.reviewed_at

    def sentence(self) -> str:
        if not self.known:
            return f"freshness unknown (results from {self.commit[:10] or 'no commit'}; no git history here)"
        if self.reviewed_at:
            return (
                f"STANDS BY REVIEW: results from {self.commit[:10]}; the code behind them changed since "
                f"(commit {self.changed_by}); reviewed at {self.reviewed_at[:10]}: {self.reason} "
                "(not re-measured: re-run the suite to refresh)"
            )
        if self.stale:
            return (
                f"STALE: results from {self.commit[:10]}; the code behind them changed since "
                f"(commit {self.changed_by}): re-run the suite"
            )
        return f"fresh: results from {self.commit[:10]}; no change to the code behind them since"


REVIEWS = "results/reviews.csv"
"""Stale results a person reviewed: ``suite,results_commit,reviewed_at,reason``, one line each. A
review says why rows of ``suite`` measured at ``results_commit`` still describe the code at
``reviewed_at`` (e.g. the changed code is imported but never runs on their path; a kernel replaced
by a bit-for-bit equal one); it covers changes up to ``reviewed_at`` only, and the pages say
"stands by review" with the reason, never "fresh"."""


@dataclass(frozen=True)
class Review:
    suite: str
    results_commit: str
    reviewed_at: str
    reason: str


@lru_cache(maxsize=1)
def reviews(path: str = REVIEWS) -> tuple[Review, ...]:
    """The reviews in ``path`` (relative to the repository). A malformed line is an error naming
    the file and line, not a silently ignored review."""
    import csv

    from repro.provenance import REPO

    file = REPO / path
    if not file.is_file():
        return ()
    out = []
    with file.open(newline="") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header != ["suite", "results_commit", "reviewed_at", "reason"]:
            raise ValueError(f"{path}: the header must be suite,results_commit,reviewed_at,reason, got {header}")
        for line, row in enumerate(rows, start=2):
            if len(row) != 4 or not all(x.strip() for x in row):
                raise ValueError(f"{path}:{line}: expected 4 non-empty fields, got {row}")
            if len(row[1]) < 7 or len(row[2]) < 7:
                raise ValueError(f"{path}:{line}: commits need at least 7 hex digits, got {row[1]!r}, {row[2]!r}")
            out.append(Review(*(x.strip() for x in row)))
    return tuple(out)


def _changed_code(suite: str, paths: list[str], sha: str, head: str) -> list[str]:
    """The files of ``paths`` whose code differs between ``sha`` and ``head``: not comments,
    formatting or docstrings alone, nor (for the suite's own module) its report alone."""
    changed = [p for p in git("diff", "--name-only", sha, head, "--", *paths).splitlines() if p]
    changed = [p for p in changed if not _same_code(p, sha, head)]
    own = f"suites/{suite}.py"
    if own in changed and _report_only_change(own, sha, head):  # compare / plot / verdict / summary only
        changed.remove(own)
    return changed


def _newest_change(suite: str, paths: list[str], sha: str, head: str = "HEAD") -> str:
    """The newest commit after ``sha`` up to ``head`` that changed the code behind ``suite`` ("" if
    none). Judged on the net change (a change and its revert leave results fresh); the commit named
    is the newest whose own change is code, so a later edit of comments or of the suite's report to
    the same files is not blamed."""
    changed = _changed_code(suite, paths, sha, head)
    if not changed:
        return ""
    commits = git("log", "--format=%h", f"{sha}..{head}", "--", *changed).splitlines()
    for c in commits:
        if _changed_code(suite, changed, f"{c}^", c):
            return c
    return commits[0] if commits else ""


@lru_cache(maxsize=64)
def staleness(suite: str, commit: str) -> Staleness:
    """Staleness of rows of ``suite`` measured at ``commit`` (a ``-dirty`` suffix is dropped: the
    committed part is compared); a stale result some review covers (:data:`REVIEWS`) says so."""
    sha = commit.removesuffix("-dirty")
    if not sha or sha == "unknown" or not git("rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}"):
        return Staleness(commit, "", False)
    paths = list(number_sources(suite))
    newer = _newest_change(suite, paths, sha)
    if newer:
        full = git("rev-parse", f"{sha}^{{commit}}")
        for r in reviews():
            if r.suite != suite or not full.startswith(r.results_commit):
                continue
            at = git("rev-parse", "--verify", "--quiet", f"{r.reviewed_at}^{{commit}}")
            # a review counts from a later commit, and only while no change to the code follows it
            if at and git("merge-base", full, at) == full and not _newest_change(suite, paths, at):
                return Staleness(commit, newer, True, at, r.reason)
    return Staleness(commit, newer, True)


def frame_staleness(suite: str, df: pd.DataFrame) -> list[Staleness]:
    """One :class:`Staleness` per distinct commit of ``df``'s rows (most rows first)."""
    if df.empty or "git_commit" not in df:
        return []
    commits = df["git_commit"].astype(str).value_counts().index
    return [staleness(suite, c) for c in commits]
