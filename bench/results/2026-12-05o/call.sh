# The thirty-fourth session's call on HEAD (kernels unchanged since 21ed353; the new tests/gpu/test_llm.py): the GPU suite
# (soak deselected), issue 10's official T=4 kernel bench (L=16, B=8..256, both SGLang releases; carry .peers and
# .whl), then in the time left a 1,500-step lockstep soak and `replayssm demo`.
#   REPLAYSSM_COMMIT=<hash> LIMIT=540 bash bench/results/2026-12-05o/call.sh
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 REPLAYSSM_COMMIT=${REPLAYSSM_COMMIT:-unknown}
S=$(date +%s)
R=/tmp/o; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $R/gpu.txt
pip install -q --no-index --no-deps .whl/*.whl > /dev/null 2>&1
python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu tests/gpu --deselect tests/gpu/test_soak.py -rfEs \
  > $R/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $(( $(date +%s) - S ))s"; tail -2 $R/gpu_tests.log
left=$(( ${LIMIT:-540} - ($(date +%s) - S) ))
t=$(( left > 160 ? 150 : left - 10 ))
timeout $(( t + 15 )) python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 \
  --target-ms 15 --max-seconds $t --tag kernels_T4 --out $R/kernels_T4 > $R/kernels_T4.log 2>&1
echo "bench rc=$? at $(( $(date +%s) - S ))s"; tail -8 $R/kernels_T4.log | cut -c1-220
tar -czf $OUT/call.tgz -C /tmp o
left=$(( ${LIMIT:-540} - ($(date +%s) - S) ))
if [ $left -gt 80 ]; then
  timeout $(( left - 40 )) env REPLAYSSM_SOAK_STEPS=1500 REPLAYSSM_SOAK_LOG=$R/soak.jsonl \
    python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1
  echo "soak rc=$? at $(( $(date +%s) - S ))s"; tail -2 $R/soak.log
fi
left=$(( ${LIMIT:-540} - ($(date +%s) - S) ))
[ $left -gt 20 ] && { timeout $left python3 -m replayssm demo > $R/demo.log 2>&1; echo "demo rc=$?"; tail -4 $R/demo.log; }
tar -czf $OUT/call.tgz -C /tmp o
