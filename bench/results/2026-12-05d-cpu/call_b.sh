# The twenty-eighth session's second device call: HEAD's GPU suite but the soak (the session changed the ops'
# argument checks, the abort of a step without a verify and, if call_a's A/B said so, the DIF default), a 1,500-step
# lockstep soak and `replayssm demo`. Carry `.peers` (the peers' CUDA-graph tests). About 9 minutes on a cold machine.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s)
R=/tmp/c2; rm -rf $R; mkdir -p $R
git log --oneline -1 > $R/head.txt
PEERS=""; [ -d .peers ] || PEERS="--deselect tests/gpu/test_peer_graphs.py"
timeout 390 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py $PEERS \
  > $R/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $(( $(date +%s) - S ))s"; tail -4 $R/gpu_tests.log; cp -r $R $OUT/
left=$(( ${LIMIT:-585} - 5 - ($(date +%s) - S) ))
timeout $(( left > 150 ? 100 : left - 50 )) env REPLAYSSM_SOAK_STEPS=1500 REPLAYSSM_SOAK_LOG=$R/soak.jsonl \
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1
echo "soak rc=$? at $(( $(date +%s) - S ))s"; tail -3 $R/soak.log; cp -r $R $OUT/
left=$(( ${LIMIT:-585} - ($(date +%s) - S) ))
timeout $left python3 -m replayssm demo > $R/demo.log 2>&1; echo "demo rc=$?"; tail -12 $R/demo.log
cp -r $R $OUT/
