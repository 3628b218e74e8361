# Prepared by the thirtieth session for the next one with an H200 (not run yet). Two calls of under 10 minutes each,
# with REPLAYSSM_COMMIT=<HEAD> exported. Call A: the GPU suite on HEAD (the conftest now chooses the run: `-m gpu`),
# the 3,000-step soak, and the overlap probe on the card the targets are set on. Call B (CALL=b): issue 15's official
# e2e rows at C=1, 8, 64 on HEAD (27B; the preset is now `--model`).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s); R=/tmp/nc; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
if [ "${CALL:-a}" = a ]; then
  timeout 330 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu tests/gpu --deselect tests/gpu/test_soak.py \
    -rfE > $OUT/gpu_tests.log 2>&1; echo "gpu suite rc=$? at $(( $(date +%s) - S ))s"; tail -3 $OUT/gpu_tests.log
  timeout 140 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$OUT/soak.jsonl python3 -m pytest -q -p no:cacheprovider \
    -p no:benchmark -m gpu tests/gpu/test_soak.py > $OUT/soak.log 2>&1; echo "soak rc=$?"; tail -2 $OUT/soak.log
  mkdir -p $OUT/overlap; OUT=$OUT/overlap B=128 timeout 90 python3 bench/results/2026-12-05h-h100/overlap_probe.py 2>&1 \
    | grep -v Warning | tee $OUT/overlap/overlap_probe.log
else
  timeout 560 python3 -m replayssm bench e2e --model qwen3.5-27b --concurrency 1 8 64 --steps 16 --prompt-len 64 \
    --no-phases --tag e2e_27b --out $OUT > $OUT/e2e_27b.log 2>&1; echo "e2e rc=$?"; tail -12 $OUT/e2e_27b.log
fi
