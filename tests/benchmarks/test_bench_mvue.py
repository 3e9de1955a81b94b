"""Benchmarks of the ``mvue`` declaration (repro/kbench/mvue.py: inputs, check, variants): every
variant in its regression set, checked, timed as device time, its timed output re-checked."""

from __future__ import annotations

import pytest

from repro.kbench.mvue import MVUE
from tests.benchmarks import declared_params, run_declared


@pytest.mark.parametrize(("case", "variant"), declared_params(MVUE))
def test_mvue(benchmark, case, variant, copy_gbps):
    run_declared(benchmark, MVUE, case, variant, copy_gbps)
