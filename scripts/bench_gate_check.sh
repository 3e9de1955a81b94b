#!/usr/bin/env bash
# GPU acceptance check of the kernel-regression gate (issue 27), one machine start:
#   bash scripts/bench_gate_check.sh OUT_ROOT [K=3] [extra args of `python -m repro bench gate-check`]
# 1. baseline: K fresh runs of tests/benchmarks -> OUT_ROOT/results/benchmarks/<gpu-slug>/gate/
# 2. A/A: one more run of the same commit must pass the gate
# 3. A/B: one run with REPRO_PLANT_SLOWDOWN=geglu must fail exactly test_geglu[ours-*]
# runs, logs, reports and summary.json -> OUT_ROOT/results/benchmarks/<gpu-slug>/gate-check/.
# Exit 0 when A/A passes and A/B fails exactly the planted benchmarks. On a copy of the tree without
# .git, set REPRO_GIT_COMMIT to the commit measured.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${1:?usage: bench_gate_check.sh OUT_ROOT [K] [args]}"
k="${2:-3}"
shift 2 || shift $#
exec python3 -m repro bench gate-check --root "$root" --runs "$k" "$@"
