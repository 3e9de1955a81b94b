"""Benchmarks of the ``transposable`` declaration (repro/kbench/transposable.py: inputs, check, variants): every
variant in its regression set, checked, timed as device time, its timed output re-checked."""

from __future__ import annotations

import pytest

from repro.kbench.transposable import TRANSPOSABLE
from tests.benchmarks import declared_params, run_declared


@pytest.mark.parametrize(("case", "variant"), declared_params(TRANSPOSABLE))
def test_transposable(benchmark, case, variant, copy_gbps):
    run_declared(benchmark, TRANSPOSABLE, case, variant, copy_gbps)
