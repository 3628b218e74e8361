# The twenty-ninth session's H100 call (no H200 would start): (1) the GPU suite but the soak on HEAD, whose
# verify takes its window products from the folded blocks by default at L <= 16 (REPLAYSSM_VERIFY_DIF unset = 2
# there); (2) issue 10's T=4 kernel bench (L=16, B=8..256, both SGLang releases; carry .peers) twice on the same
# warm card: the default (mode 2) and REPLAYSSM_VERIFY_DIF=0 (the stream, the previous default), for the fold cost
# per record of each.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
R=/tmp/c3; rm -rf $R; mkdir -p $R
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $(( $(date +%s) - S ))s"; tail -4 $R/gpu_tests.log; cp $R/gpu_tests.log $OUT/
for arm in m2:2 stream:0; do
  left=$(( ${LIMIT:-585} - ($(date +%s) - S) )); [ $left -lt 60 ] && { echo "no time for $arm"; break; }
  n=${arm%%:*}; t=$(( left > 150 ? 150 : left - 10 ))
  timeout $(( t + 15 )) env REPLAYSSM_VERIFY_DIF=${arm##*:} python3 -m replayssm bench kernels --windows 4 --rings 16 \
    --batches 8 64 128 256 --target-ms 10 --max-seconds $t --tag kernels_T4_$n --out $R/$n > $R/kernels_T4_$n.log 2>&1
  echo "bench $n rc=$? at $(( $(date +%s) - S ))s"; tail -9 $R/kernels_T4_$n.log | cut -c1-220
done
tar -czf $OUT/call_c.tgz -C /tmp c3
