# One device call on this tree (8ff2e5b's kernels): the end-to-end engine at the 27B geometry, C=1, 8, 64 (no peak
# search: device time), to see the one-launch verify's and fold ahead's effect on small engine steps.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r4; mkdir -p $R
save() { tar -czf $OUT/run4.tgz -C /tmp r4; }
timeout 380 python3 -m replayssm bench e2e --concurrency 1 8 64 --steps 16 --prompt-len 64 --no-phases --tag e2e_27b --out $R > $R/e2e_27b.log 2>&1; tail -14 $R/e2e_27b.log
save
