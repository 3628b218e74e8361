# Thirty-first session, second device call (H200): the switch sweep of replay engine steps at C=64 (e2e_sweep.py),
# then the GPU suite with the SGLang kernel files carried (`.peers`, so the peer tests run). REPLAYSSM_COMMIT exported.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
timeout 330 python3 bench/results/2026-12-05i-h200/e2e_sweep.py 2>&1 | grep -v -i warn | tee $OUT/e2e_sweep.log
echo "sweep at $(( $(date +%s) - S ))s"
left=$(( 580 - ($(date +%s) - S) ))
timeout $left python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu tests/gpu --deselect tests/gpu/test_soak.py \
  -rfEs > $OUT/gpu_tests.log 2>&1; echo "gpu suite rc=$? at $(( $(date +%s) - S ))s"; tail -4 $OUT/gpu_tests.log
