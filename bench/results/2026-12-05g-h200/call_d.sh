# The twenty-ninth session's H200 call: issue 10's official T=4 kernel bench (L=16, B=8..256, both SGLang
# releases; carry .peers) on HEAD, whose staged verify takes its window products from the folded blocks by default
# at L <= 16 (REPLAYSSM_VERIFY_DIF unset = mode 2; the arms set 2 to say so in the JSON), then the same run with REPLAYSSM_VERIFY_DIF=0 (the stream, the
# previous default) and the default again, on the same warm card: m2 / stream / m2. Only T=4, L=16 changes with the
# mode (T <= 2 takes FMA rows, T=8 has 16 window vectors, L=32 keeps mode 0), so the T=2 / T=8 runs stand.
# Then, in the time left, a 3,000-step lockstep soak and `replayssm demo` on HEAD.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 REPLAYSSM_COMMIT=${REPLAYSSM_COMMIT:-unknown}
S=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
R=/tmp/c4; rm -rf $R; mkdir -p $R
for arm in m2:2:a stream:0:a m2:2:b; do
  IFS=: read n mode rep <<< "$arm"
  left=$(( ${LIMIT:-400} - ($(date +%s) - S) )); [ $left -lt 60 ] && { echo "no time for $n $rep"; break; }
  t=$(( left > 150 ? 150 : left - 10 ))
  timeout $(( t + 15 )) env REPLAYSSM_VERIFY_DIF=$mode python3 -m replayssm bench kernels --windows 4 --rings 16 \
    --batches 8 64 128 256 --target-ms 15 --max-seconds $t --tag kernels_T4_${n}_$rep --out $R/${n}_$rep \
    > $R/kernels_T4_${n}_$rep.log 2>&1
  echo "bench $n $rep rc=$? at $(( $(date +%s) - S ))s"; tail -6 $R/kernels_T4_${n}_$rep.log | cut -c1-220
done
tar -czf $OUT/call_d.tgz -C /tmp c4
left=$(( ${LIMIT:-400} - ($(date +%s) - S) ))
if [ $left -gt 60 ]; then
  timeout $(( left - 40 )) env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl \
    python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1
  echo "soak rc=$? at $(( $(date +%s) - S ))s"; tail -2 $R/soak.log
fi
left=$(( ${LIMIT:-400} - ($(date +%s) - S) ))
[ $left -gt 20 ] && { timeout $left python3 -m replayssm demo > $R/demo.log 2>&1; echo "demo rc=$?"; tail -6 $R/demo.log; }
tar -czf $OUT/call_d.tgz -C /tmp c4
