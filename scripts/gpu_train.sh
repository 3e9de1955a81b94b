#!/usr/bin/env bash
# Pretraining suites on a lent GPU machine (device tool), spread over several calls of < 10 min:
# each call trains what is missing within REPRO_TRAIN_MINUTES (runs checkpoint and stop there),
# and packs the suites' rows, figures and run folders (no checkpoints) into $OUT/campaign.tar.gz.
# Run state lives in .persist/ (git-ignored), which the machine keeps between calls while it is
# held; run folders already committed under results/<gpu>/runs are copied in first, so a fresh
# machine only retrains unfinished runs.
#   usage: REPRO_GIT_COMMIT=<sha> SUITES="figure10 table5" MINUTES=8 bash scripts/gpu_train.sh
set -uo pipefail
OUT=${OUT:-gpu_out}
mkdir -p "$OUT" .persist
export PYTHONUNBUFFERED=1 REPRO_TRAIN_MINUTES=${MINUTES:-8}
slug=$(python3 -c "import torch; from repro.provenance import device_slug; print(device_slug(torch.device('cuda')))")
mkdir -p ".persist/results/$slug/runs" ".persist/figures/$slug"
[ -d "results/$slug/runs" ] && cp -rn "results/$slug/runs/." ".persist/results/$slug/runs/"
export REPRO_RESULTS_DIR=$PWD/.persist/results
rc=0
for s in ${SUITES:?}; do
    python3 -m repro run "$s" --figures-dir ".persist/figures/$slug" 2>&1 | tee -a "$OUT/train.log" | grep -v "^\[train\] step"
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || break
done
tar czf "$OUT/campaign.tar.gz" --exclude='*.pt' -C .persist results figures
echo "rc=$rc"
exit "$rc"
