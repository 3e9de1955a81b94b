#!/usr/bin/env bash
# A GPU campaign in one call on a lent machine (device tool): install Snakemake from carried
# wheels, run `snakemake TARGETS` (full profile), run the GPU-marked tests, optionally save a
# benchmark baseline, and pack results, figures and logs into $OUT.
#   usage: REPRO_GIT_COMMIT=<sha> TARGETS="table2 table3" [BENCH=1] [TESTS=0] bash scripts/gpu_run.sh
# Everything produced comes back as $OUT/campaign.tar.gz (unpack it at the repo root).
set -uo pipefail
OUT=${OUT:-gpu_out}
TARGETS=${TARGETS:-all}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -m snakemake --version
# shellcheck disable=SC2086
python3 -m snakemake $TARGETS 2>&1 | tee "$OUT/snakemake.log"
rc=$?
[ "${TESTS:-1}" = 1 ] && TRITON_INTERPRET=0 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_sparse_gemm.py tests/kernels/test_masked_decay.py \
    tests/kernels/test_cslt_pack*.py tests/layers tests/kernels/test_mvue.py tests/kernels/test_geglu.py \
    2>&1 | tail -5 | tee -a "$OUT/snakemake.log"
if [ "${BENCH:-0}" = 1 ]; then  # also save a pytest-benchmark baseline of this GPU
    bash scripts/bench_baseline.sh -q 2>&1 | tail -40 | tee "$OUT/bench.log"
fi
# one archive (the device tool returns at most 8 files, 2 folders deep): results, figures, logs
slug=$(python3 -c "import torch; from repro.provenance import device_slug; print(device_slug(torch.device('cuda')))")
tar czf "$OUT/campaign.tar.gz" $(ls -d results/"$slug" results/benchmarks figures/"$slug" logs 2>/dev/null)
exit $rc
