#!/usr/bin/env bash
# Install the suite and what it needs, on a fresh machine too.
# torch first: where no torch is installed, take 2.13.0 (on a CPU-only machine of this project's
# workplace that is a local CPU build; a plain "torch" requirement would pull GBs of CUDA wheels).
# A machine that already has torch (2.11+, e.g. a GPU box) keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "bootstrap: installing torch==2.13.0" >&2
    "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[test]"
# Triton 3.6 (torch 2.11's) runs loop bounds given at run time through int() of a 1-element
# array, which NumPy 2.4 refuses: on such a machine the CPU tests of the pivot and flex kernels
# (TRITON_INTERPRET=1) fail. Keep a NumPy that converts where the interpreter needs it.
if ! "$PY" scripts/check_triton_interpreter.py; then
    echo "bootstrap: this Triton's interpreter needs numpy<2.4; installing it" >&2
    "$PY" -m pip install -q "numpy<2.4"
    "$PY" scripts/check_triton_interpreter.py
fi
