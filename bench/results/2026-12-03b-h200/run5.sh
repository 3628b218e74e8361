# One device call (run right after run 4, same tree, the command given inline): the e2e engine's peak search in one
# memory budget, with C=8 as its fixed row.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1; mkdir -p /tmp/r5
timeout 230 python3 -m replayssm bench e2e --concurrency 8 --steps 16 --prompt-len 64 --no-phases --peak --capacity-budget-gib 79.3 --tag e2e_27b_peak --out /tmp/r5 > /tmp/r5/e2e_27b_peak.log 2>&1; tail -16 /tmp/r5/e2e_27b_peak.log; cp /tmp/r5/* $OUT/
