# The second device call of the next session: HEAD's GPU suite but the soak (~4 min: each DIF mode is forced in
# tests/gpu/test_staged_retry.py), the 3,000-step lockstep soak (~100 s) and `replayssm demo` (~60 s). HEAD's pool,
# engine and CLI changes of the twenty-fourth session and the packed fold's gates fix of the twenty-fifth have run on
# no GPU yet. If a DIF mode won in next_call1.sh, make it the default first (verify_launch.dots_in_fold), so that the
# soak and the demo run it.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/c2; rm -rf $R; mkdir -p $R
# the peers' CUDA-graph tests (tests/gpu/test_peer_graphs.py since the twenty-seventh session) need .peers carried
# (`replayssm bench peers` here first); without it they would try pip, which the device cannot reach: left out then
PEERS=""; [ -d .peers ] || PEERS="--deselect tests/gpu/test_peer_graphs.py"
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py $PEERS \
  > $R/gpu_tests.log 2>&1
echo "gpu tests rc=$?"; tail -4 $R/gpu_tests.log; tar -czf $OUT/call2.tgz -C /tmp c2
timeout 150 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl \
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1
echo "soak rc=$?"; tail -3 $R/soak.log; tar -czf $OUT/call2.tgz -C /tmp c2
timeout 100 python3 -m replayssm demo > $R/demo.log 2>&1; echo "demo rc=$?"; tail -15 $R/demo.log
tar -czf $OUT/call2.tgz -C /tmp c2
