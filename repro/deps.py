"""The source files a suite's numbers depend on: its module and everything it imports from this
repository (``kernels``, ``repro``, ``suites``), followed transitively, imports inside functions
included, read from the source (nothing is imported). A package's ``__init__`` is listed but its
own imports are not followed: it re-exports every module, and ``import kernels.ops.geglu`` does not
make a GEGLU table depend on the flex-SS kernels in any way that changes a number. A name imported
from a package (``from repro.train import ensure_run``) is followed to the module its ``__init__``
takes it from (before session 54 it was not, so no training suite depended on the trainer). The Snakemake
rules take them as inputs (a change re-runs the suite) and :mod:`repro.staleness` asks git
whether any changed since a result's commit."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from repro.provenance import REPO

PACKAGES = ("kernels", "repro", "suites")
PRESENTATION = frozenset(
    {
        "repro/plots.py",
        "repro/dashboard.py",
        "repro/paper.py",
        "repro/cli.py",
        "repro/__main__.py",
        "suites/__init__.py",
    }
)
"""Modules that list, draw, publish or print numbers but never produce one: left out of the inputs
(``suites/__init__.py`` is the registry of suite names the CLI and the workflow read: registering a
new suite changes no other suite's numbers)."""


def _module_file(name: str, root: Path) -> Path | None:
    """``a.b.c`` -> a/b/c.py or a/b/c/__init__.py under ``root`` (None outside our packages)."""
    if name.split(".")[0] not in PACKAGES:
        return None
    base = root.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@lru_cache(maxsize=64)
def _reexports(init: Path, root: Path) -> dict[str, str]:
    """Name -> the module a package's ``__init__`` takes it from (``from .x import name`` or
    ``from pkg.x import name``), as a dotted name; parsed once per ``__init__``."""
    pkg = init.parent.relative_to(root).parts
    out: dict[str, str] = {}
    for node in ast.parse(init.read_text(), str(init)).body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                mod = ".".join([*pkg[: len(pkg) - node.level + 1], *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            out.update({a.asname or a.name: mod for a in node.names})
    return out


def _imports(path: Path, root: Path) -> set[Path]:
    """Files of our packages imported anywhere in ``path`` (``from pkg import mod`` resolves
    ``pkg.mod`` when that is a module, else ``pkg``), with each package's ``__init__``."""
    rel = path.relative_to(root).with_suffix("")
    pkg_parts = list(rel.parts[:-1])
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            names = [f"{mod}.{a.name}" for a in node.names] + [mod]
            init = _module_file(mod, root)
            if init is not None and init.name == "__init__.py":  # names re-exported by a package
                names += [_reexports(init, root).get(a.name, "") for a in node.names]
        for name in filter(None, names):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # the package __init__ files run on the way
                p = _module_file(".".join(parts[:i]), root)
                if p is not None:
                    found.add(p)
    return found


DATA_FILES = {
    "repro/eval/harness.py": ("repro/eval/tasks/*",),
    "repro/eval/evalsets.py": ("repro/eval/smoke_sets/*",),
}
"""Tracked non-Python files a module reads to produce numbers (task configs, the smoke evaluation
sets): a suite that imports the module depends on them too (an edited task yaml re-runs it)."""


@lru_cache(maxsize=32)
def suite_sources(suite: str, root: Path = REPO) -> tuple[str, ...]:
    """Repository-relative paths of every source file behind ``suite``'s numbers, sorted."""
    start = root / "suites" / f"{suite}.py"
    if not start.is_file():
        raise ValueError(f"no suite module {start.relative_to(root)}")
    seen: set[Path] = set()
    todo = [start]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        if p.name != "__init__.py":  # a package's __init__ re-exports every module: not followed
            todo.extend(_imports(p, root) - seen)
    rel = {p.relative_to(root).as_posix() for p in seen}
    for module, patterns in DATA_FILES.items():
        if module in rel:
            rel |= {f.relative_to(root).as_posix() for pat in patterns for f in root.glob(pat) if f.is_file()}
    return tuple(sorted(rel - PRESENTATION))
