"""The import rules of the source tree (``kernels/``, ``repro/``, ``suites/``, and the user-facing
scripts at the top of ``scripts/``), read from the source with ``ast`` (nothing is imported):

1. A ``_``-prefixed *name* (function, class, constant; dunders aside) is private to the module
   that defines it: no other module takes it, neither as ``from M import _name`` nor as
   ``M._name`` through an imported module. A helper that several modules need gets a public name
   in a shared module (``kernels.ops.common`` for the kernel families and the layers above them)
   or is a public name of its family's module (``kernels.ops.geglu.act_and_grad``).
2. A ``_``-prefixed *module* (a Triton twin such as ``kernels/ops/_flex_triton.py``, a code
   generator, a package's shared helpers such as ``suites/_common.py``) is private to its package:
   only modules of the same directory import it. So ``kernels.layers`` reaches the Triton kernels
   through the public op modules (``kernels.ops.flex.fast_mask``), never through a twin.
3. No name a package exports shadows one of its submodules (``from kernels import geglu`` is the
   function; the module is ``kernels.ops.geglu``, and ``kernels.ops`` re-exports nothing).

Tests are exempt (they test private helpers on purpose), and so are the one-off GPU probes under
``scripts/probes/``, which poke at kernel internals by design.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "repro", "suites")


def _sources() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]
    return files + sorted((REPO / "scripts").glob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """Whether dotted ``name`` is a module or package of the repository."""
    base = REPO.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _violations(path: Path) -> list[str]:
    module = _module_name(path)
    package = _package_of(module, path)
    tree = ast.parse(path.read_text(), str(path))
    bad: list[str] = []
    aliases: dict[str, str] = {}  # local name -> one of our modules

    def check_module(target: str, lineno: int) -> None:
        parts = target.split(".")
        if parts[0] not in PACKAGES:
            return
        for i, part in enumerate(parts):
            if _private(part) and ".".join(parts[:i]) != package:
                bad.append(f"{path.relative_to(REPO)}:{lineno}: private module {target} outside {'.'.join(parts[:i])}")
                return

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                check_module(a.name, node.lineno)
                if a.name.split(".")[0] in PACKAGES:
                    aliases[a.asname or a.name.split(".")[0]] = a.asname and a.name or a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            check_module(node.module, node.lineno)
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if _is_module(full):
                    check_module(full, node.lineno)
                    aliases[a.asname or a.name] = full
                elif _private(a.name):
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}: from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if not isinstance(base, ast.Name) or base.id not in aliases:
                continue
            target = ".".join([aliases[base.id], *reversed(chain)])
            owner = target.rpartition(".")[0]
            if owner != module and not _is_module(target):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {target}")
    return bad


def test_no_module_takes_another_modules_private_names():
    bad = [v for path in _sources() for v in _violations(path)]
    assert not bad, "private names or modules used outside their owner:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", ["kernels", "kernels.ops", "kernels.layers", "repro", "suites"])
def test_exported_names_do_not_shadow_submodules(package):
    pkg = importlib.import_module(package)
    submodules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    shadowed = sorted(
        name for name in submodules if hasattr(pkg, name) and getattr(pkg, name).__class__.__name__ != "module"
    )
    assert not shadowed, f"{package} exports {shadowed}, which shadow its submodules of the same names"


def _flag_writes(path: Path) -> list[str]:
    """Places where ``path`` rebinds module-level state at run time: a ``global`` statement (a
    function rebinding one of its module's names) or an assignment to an attribute of an imported
    repository module (``timing.FLAG = True`` from elsewhere)."""
    tree = ast.parse(path.read_text(), str(path))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in PACKAGES}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            modules |= {a.asname or a.name for a in node.names if _is_module(f"{node.module}.{a.name}")}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            bad.append(f"{path.relative_to(REPO)}:{node.lineno}: global {', '.join(node.names)}")
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in modules:
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {t.value.id}.{t.attr} = ...")
    return bad


def test_no_process_wide_mutable_flags():
    """No module changes module-level state at run time (issue 28: one failed CUDA-graph capture
    must not change how every later number in the process is timed): such state lives in objects
    that a run owns (``RunContext.capture``), never in module globals."""
    bad = [v for path in _sources() for v in _flag_writes(path)]
    assert not bad, "module-level state rebound at run time:\n" + "\n".join(bad)
