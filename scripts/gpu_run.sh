#!/usr/bin/env bash
# A GPU campaign in one call on a lent machine (device tool): install Snakemake from carried
# wheels, run `snakemake TARGETS` (full profile), run the GPU-marked tests, and copy results,
# figures and logs to $OUT.
#   usage: REPRO_GIT_COMMIT=<sha> TARGETS="table2 table3" bash scripts/gpu_run.sh
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
TRITON_INTERPRET=0 python3 -m pytest -q -p no:cacheprovider tests/test_sparse_gemm.py tests/test_masked_decay.py \
    2>&1 | tail -5 | tee -a "$OUT/snakemake.log"
slug=$(python3 -c "import torch; from repro.provenance import device_slug; print(device_slug(torch.device('cuda')))")
names=$TARGETS
[ "$TARGETS" = all ] && names="table2 table3"
for t in $names; do
    cp results/"$slug"/"$t".csv figures/"$slug"/"$t".png figures/"$slug"/"$t".svg "$OUT"/ 2>/dev/null
done
exit $rc
