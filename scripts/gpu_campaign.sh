#!/usr/bin/env bash
# A campaign longer than one device call, on one held machine (see scripts/gpu_queue.py):
#   first call:  REPRO_GIT_COMMIT=<sha> JOBS=scripts/jobs/rerun_stale.jobs bash scripts/gpu_campaign.sh start
#   later calls: bash scripts/gpu_campaign.sh            (issued at once, while the machine is held)
# Each call waits up to WAIT seconds (default 540) and returns $OUT/campaign.tar.gz: the queue's
# status and logs and everything the jobs wrote so far under .persist/r (results) and .persist/f
# (figures); unpack it here and merge with scripts/merge_results.py.
set -uo pipefail
OUT=${OUT:-gpu_out}
mkdir -p "$OUT" .persist/queue
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ "${1:-}" = start ]; then
    : "${REPRO_GIT_COMMIT:?set REPRO_GIT_COMMIT to the commit of this tree}"
    export REPRO_GIT_COMMIT
    nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
        | tee .persist/queue/gpu.txt
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
        | tee -a .persist/queue/gpu.txt
    python3 scripts/gpu_queue.py start "${JOBS:?set JOBS to a job file}" || exit 1
fi
python3 scripts/gpu_queue.py wait "${WAIT:-540}"
rc=$?
python3 scripts/gpu_queue.py pack "$OUT/campaign.tar.gz" .persist/queue/gpu.txt .persist/queue/queue.log .persist/r .persist/f
for f in .persist/queue/logs/*.log; do echo "== $f"; tail -n 4 "$f"; done
exit $rc
