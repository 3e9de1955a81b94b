#!/usr/bin/env bash
# A campaign longer than one device call, on one held machine (see scripts/gpu_queue.py):
#   first call:  REPRO_GIT_COMMIT=<sha> JOBS=scripts/jobs/rerun_stale.jobs bash scripts/gpu_campaign.sh start
#   later calls: bash scripts/gpu_campaign.sh            (issued at once, while the machine is held)
# Each call waits up to WAIT seconds (default 540) and returns $OUT/campaign.tar.gz: the queue's
# status and logs and everything the jobs wrote so far under .persist/r (results) and .persist/f
# (figures); unpack it here and merge with scripts/merge_results.py.
#
# The jobs run in a snapshot of the tree taken at start (.persist/tree): every device call copies
# the working tree afresh, and a job that imports or inspects a file while the copy replaces it
# fails (the gate's run 0 did: "could not get source code" for a Triton kernel, campaign 324330c).
# Later calls hand the snapshot what they bring: job files dropped in .persist/queue/inbox/ and
# carried data/ paths the snapshot lacks (copied without overwriting).
set -uo pipefail
OUT=${OUT:-gpu_out}
mkdir -p "$OUT" .persist/queue/inbox
OUT=$(cd "$OUT" && pwd)
SNAP=.persist/tree
if [ "${1:-}" = start ]; then
    # the job file's "# needs: PATH ..." lines: what its jobs read that a call must carry (checked
    # here, before any GPU time goes to a job that would fail on a missing file)
    missing=""
    for path in $(sed -n 's/^# needs: *//p' "${JOBS:?set JOBS to a job file}"); do
        [ -e "$path" ] || missing="$missing $path"
    done
    if [ -n "$missing" ]; then
        echo "gpu_campaign: the job file needs$missing: carry them (device tool: carry=[...]) and start again" >&2
        exit 2
    fi
    rm -rf "$SNAP" && mkdir -p "$SNAP"
    tar --exclude=./.persist --exclude=./gpu_out -cf - . | tar -xf - -C "$SNAP" || exit 1
fi
if [ ! -d "$SNAP" ]; then
    echo "gpu_campaign: no snapshot at $SNAP: start the campaign first (bash scripts/gpu_campaign.sh start)" >&2
    exit 2
fi
mkdir -p "$SNAP/.persist/queue/inbox"
for f in .persist/queue/inbox/*.jobs; do [ -e "$f" ] && mv "$f" "$SNAP/.persist/queue/inbox/"; done
[ -d data ] && cp -rn data/. "$SNAP/data/" 2>/dev/null
cd "$SNAP" || exit 1
mkdir -p .persist/queue
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
