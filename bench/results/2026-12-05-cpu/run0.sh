# The first device call of the next session (prepared 2026-12-05 without a device): HEAD itself, whose last three
# sessions' engine, pool, op and CLI changes have not run on a GPU. About 6 minutes:
#   the GPU suite but the soak (~230 s), the lockstep soak at 3,000 steps (~100 s), `replayssm demo` (~60 s).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r0; rm -rf $R; mkdir -p $R
save() { tar -czf $OUT/run0.tgz -C /tmp r0; }
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1
echo "gpu tests rc=$?"; tail -3 $R/gpu_tests.log; save
timeout 150 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl \
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1
echo "soak rc=$?"; tail -3 $R/soak.log; save
timeout 100 python3 -m replayssm demo > $R/demo.log 2>&1; echo "demo rc=$?"; tail -15 $R/demo.log; save
