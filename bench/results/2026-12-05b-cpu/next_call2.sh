# The second device call of the next session: the 3,000-step lockstep soak (~100 s) and `replayssm demo` (~60 s) on
# HEAD, whose pool, engine and CLI changes of the twenty-fourth session have passed the GPU suite nowhere yet but in
# next_call1.sh. If a DIF mode won in next_call1.sh, make it the default first (verify_launch.dots_in_fold) so that
# the soak runs it.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/c2; rm -rf $R; mkdir -p $R
timeout 150 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl \
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1
echo "soak rc=$?"; tail -3 $R/soak.log; tar -czf $OUT/call2.tgz -C /tmp c2
timeout 100 python3 -m replayssm demo > $R/demo.log 2>&1; echo "demo rc=$?"; tail -15 $R/demo.log
tar -czf $OUT/call2.tgz -C /tmp c2
