# One device call on the session's final tree: the whole GPU suite (tests/gpu), the lockstep soak at 3,000 steps.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r3; mkdir -p $R
save() { tar -czf $OUT/run3.tgz -C /tmp r3; }
timeout 420 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
timeout 150 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1; tail -3 $R/soak.log
save
