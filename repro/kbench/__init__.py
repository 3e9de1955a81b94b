"""Kernel benchmark declarations, one per kernel, tritonbench-style (:mod:`repro.kbench.core`):
inputs per profile, bytes moved or FLOPs, the correctness check, a registered baseline and its
variants. ``suites/table2.py``, ``suites/table3.py`` and ``tests/benchmarks`` read them; both time
with :mod:`repro.timing`. This ``__init__`` imports nothing (see :mod:`repro.deps`): import the
declaration modules themselves, or :func:`repro.kbench.core.all_benches`."""
