"""Benchmarks of the ``masked_decay`` declaration (repro/kbench/masked_decay.py: inputs, check, variants): every
variant in its regression set, checked, timed as device time, its timed output re-checked."""

from __future__ import annotations

import pytest

from repro.kbench.masked_decay import MASKED_DECAY
from tests.benchmarks import declared_params, run_declared


@pytest.mark.parametrize(("case", "variant"), declared_params(MASKED_DECAY))
def test_masked_decay(benchmark, case, variant, copy_gbps):
    run_declared(benchmark, MASKED_DECAY, case, variant, copy_gbps)
