"""``scripts/check_triton_interpreter.py`` (run by ``scripts/bootstrap.sh``): passes where the
interpreter runs a kernel with a runtime loop bound (this environment must, or the pivot and flex
kernel tests fail), and fails, saying why, where it cannot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check_triton_interpreter.py"


def test_this_environment_passes_the_check():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_check_fails_and_says_why_when_the_kernel_cannot_run(monkeypatch, capsys):
    """The failure Triton 3.6 hits with NumPy 2.4 (int() of a 1-element array), raised by the launch."""
    import importlib.util

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the script sets it on import: restored after the test
    spec = importlib.util.spec_from_file_location("check_triton_interpreter", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    class _Refusing:
        def __getitem__(self, grid):
            def launch(*args):
                raise TypeError("only 0-dimensional arrays can be converted to Python scalars")

            return launch

    monkeypatch.setattr(mod, "_count_up", _Refusing())
    assert mod.main() == 1
    assert "only 0-dimensional arrays" in capsys.readouterr().err
