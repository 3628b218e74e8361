# One device call on this tree: the GPU lockstep soak (tests/gpu/test_soak.py; B=4 at the real head geometry, T=4,
# L=16: every commit folds ahead) for 5,000 steps, its JSON-lines log kept.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
REPLAYSSM_SOAK_STEPS=5000 REPLAYSSM_SOAK_LOG=$OUT/run5_soak.jsonl timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -s tests/gpu/test_soak.py > $OUT/run5_soak.log 2>&1; tail -3 $OUT/run5_soak.log
