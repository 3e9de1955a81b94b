"""Benchmarks of the ``geglu`` declaration (repro/kbench/geglu.py: inputs, check, variants): every
variant in its regression set, checked, timed as device time, its timed output re-checked."""

from __future__ import annotations

import pytest

from repro.kbench.geglu import GEGLU
from tests.benchmarks import declared_params, run_declared


@pytest.mark.parametrize(("case", "variant"), declared_params(GEGLU))
def test_geglu(benchmark, case, variant, copy_gbps):
    run_declared(benchmark, GEGLU, case, variant, copy_gbps)
