"""Benchmarks of the ``nm_mask`` declaration (repro/kbench/nm_mask.py: inputs, check, variants): every
variant in its regression set, checked, timed as device time, its timed output re-checked."""

from __future__ import annotations

import pytest

from repro.kbench.nm_mask import NM_MASK
from tests.benchmarks import declared_params, run_declared


@pytest.mark.parametrize(("case", "variant"), declared_params(NM_MASK))
def test_nm_mask(benchmark, case, variant, copy_gbps):
    run_declared(benchmark, NM_MASK, case, variant, copy_gbps)
