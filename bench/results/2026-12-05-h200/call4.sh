# Device call 4 of 2026-12-05: the e2e engine's peak search on HEAD in one memory budget, C=8 as its fixed row.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/c4; rm -rf $R; mkdir -p $R
timeout 560 python3 -m replayssm bench e2e --concurrency 8 --steps 16 --prompt-len 64 --no-phases --peak \
  --capacity-budget-gib 79.3 --tag e2e_27b_peak --out $R > $R/e2e_27b_peak.log 2>&1; echo "peak rc=$?"
tail -16 $R/e2e_27b_peak.log; cp $R/* $OUT/
