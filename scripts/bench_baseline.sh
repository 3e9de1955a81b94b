#!/usr/bin/env bash
# Save a kernel-benchmark baseline for this machine's GPU: K fresh runs of tests/benchmarks (device
# time per call), per-benchmark thresholds from their run-to-run spread:
#   bash scripts/bench_baseline.sh [K=3] [extra args of `python -m repro bench save`]
# writes results/benchmarks/<gpu-slug>/gate/{gate.json,runs/,logs/}. Check a later commit with
#   python -m repro bench check
# Baselines are per GPU: on a machine without a CUDA GPU this refuses (exit 2).
set -euo pipefail
cd "$(dirname "$0")/.."
k="${1:-3}"
shift || true
exec python3 -m repro bench save --runs "$k" "$@"
