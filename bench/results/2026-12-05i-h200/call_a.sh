# Thirty-first session, first device call (H200): issue 15's gap profile at C=64 (replay, recurrent, plain; overlap on
# as in the official bench), then the GPU suite on HEAD and the soak. Run with REPLAYSSM_COMMIT=<hash> exported.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
mkdir -p $OUT/gaps
timeout 200 env OUT=$OUT/gaps PROF=${PROF:-replay:64,recurrent:64,plain:64} python3 \
  bench/results/2026-12-05i-h200/gap_prof.py 2>&1 | grep -v -i warn | tee $OUT/gaps/gap_prof.log
echo "gaps at $(( $(date +%s) - S ))s"
timeout 300 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu tests/gpu --deselect tests/gpu/test_soak.py \
  -rfE > $OUT/gpu_tests.log 2>&1; echo "gpu suite rc=$? at $(( $(date +%s) - S ))s"; tail -3 $OUT/gpu_tests.log
left=$(( 570 - ($(date +%s) - S) ))
[ $left -gt 40 ] && timeout $left env REPLAYSSM_SOAK_STEPS=2000 REPLAYSSM_SOAK_LOG=$OUT/soak.jsonl python3 -m pytest -q \
  -p no:cacheprovider -p no:benchmark -m gpu tests/gpu/test_soak.py > $OUT/soak.log 2>&1; echo "soak rc=$?"; tail -2 $OUT/soak.log
