#!/usr/bin/env bash
# Save a kernel-benchmark baseline for this machine's GPU (pytest-benchmark, tests/benchmarks):
#   bash scripts/bench_baseline.sh [extra pytest args]
# writes results/benchmarks/<gpu-slug>/<machine-id>/NNNN_<commit>_<date>.json. Compare a later
# run with it:
#   pytest tests/benchmarks --benchmark-storage=results/benchmarks/<gpu-slug> \
#       --benchmark-compare --benchmark-compare-fail=median:10%
# Baselines are per GPU: on a machine without a CUDA GPU this refuses (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
slug=$(python3 -c "import torch; from repro.provenance import device_slug; print(device_slug(torch.device('cuda')) if torch.cuda.is_available() else 'cpu')")
if [ "$slug" = cpu ]; then
    echo "bench_baseline.sh: no CUDA GPU here. Benchmark baselines are per GPU (results/benchmarks/<gpu-slug>);" >&2
    echo "run this on the GPU whose baseline you want. On a CPU, 'pytest tests/benchmarks' only checks the benchmarks run." >&2
    exit 1
fi
echo "saving a benchmark baseline for $slug in results/benchmarks/$slug"
# the saved run is named after the commit measured (REPRO_GIT_COMMIT on a copy without .git)
commit=$(python3 -c "from repro.provenance import git_commit; print(git_commit()[:12])")
TRITON_INTERPRET=0 exec python3 -m pytest tests/benchmarks -p no:cacheprovider \
    --benchmark-save="${commit}_$(date -u +%Y%m%dT%H%M%SZ)" --benchmark-storage="results/benchmarks/$slug" "$@"
