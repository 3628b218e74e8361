# Device call 3 of 2026-12-05: the end-to-end engine on HEAD (27B geometry, random bf16 weights, graphs on), the
# command of the README's e2e table; the last official e2e run was 8ff2e5b (2026-12-03b), and the engine, pool and
# kernels have changed since.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/c3; rm -rf $R; mkdir -p $R
timeout 560 python3 -m replayssm bench e2e --concurrency 1 8 64 --steps 16 --prompt-len 64 --no-phases --tag e2e_27b \
  --out $R > $R/e2e_27b.log 2>&1; echo "e2e rc=$?"; tail -12 $R/e2e_27b.log; cp $R/* $OUT/
