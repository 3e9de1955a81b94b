#!/usr/bin/env bash
# The whole GPU campaign of the foundation issue in one call on a lent H100 (device tool):
# install Snakemake from carried wheels, run `snakemake` (full profile), run the GPU-marked tests,
# and copy results, figures and logs to $OUT.
#   usage: REPRO_GIT_COMMIT=<sha> bash scripts/gpu_run.sh
set -uo pipefail
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -m snakemake --version
python3 -m snakemake all 2>&1 | tee "$OUT/snakemake.log"
rc=$?
TRITON_INTERPRET=0 python3 -m pytest -q -p no:cacheprovider tests/test_sparse_gemm.py tests/test_masked_decay.py \
    2>&1 | tail -5 | tee -a "$OUT/snakemake.log"
slug=$(python3 -c "import torch; from repro.provenance import device_slug; print(device_slug(torch.device('cuda')))")
cp results/"$slug"/table2.csv results/"$slug"/table3.csv figures/"$slug"/table2.png figures/"$slug"/table3.png \
    figures/"$slug"/table2.svg figures/"$slug"/table3.svg "$OUT"/ 2>/dev/null
exit $rc
