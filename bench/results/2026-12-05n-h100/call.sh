# The thirty-third session's last call (on whichever card came): issue 10's T=4 kernel bench at HEAD (L=16,
# B=8..256, both SGLang releases; carry .peers and .whl), then the GPU suite (soak deselected) in the time left.
#   REPLAYSSM_COMMIT=<hash> LIMIT=330 bash bench/results/2026-12-05n-h100/call.sh
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 REPLAYSSM_COMMIT=${REPLAYSSM_COMMIT:-unknown}
S=$(date +%s)
R=/tmp/n; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $R/gpu.txt
pip install -q --no-index --no-deps .whl/*.whl > /dev/null 2>&1
timeout 150 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 15 \
  --max-seconds 130 --tag kernels_T4 --out $R/kernels_T4 > $R/kernels_T4.log 2>&1
echo "bench rc=$? at $(( $(date +%s) - S ))s"; tail -7 $R/kernels_T4.log | cut -c1-240
tar -czf $OUT/call.tgz -C /tmp n
left=$(( ${LIMIT:-330} - ($(date +%s) - S) ))
timeout $(( left > 20 ? left : 20 )) python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu tests/gpu \
  --deselect tests/gpu/test_soak.py -rfEs > $R/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $(( $(date +%s) - S ))s"; tail -2 $R/gpu_tests.log
tar -czf $OUT/call.tgz -C /tmp n
