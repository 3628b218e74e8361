# The twenty-ninth session's second H100 call: a 3,000-step lockstep soak and `replayssm demo` on HEAD (the DIF
# default and the engine split included).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s)
R=$OUT/call_e; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt
timeout 200 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl \
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1
echo "soak rc=$? at $(( $(date +%s) - S ))s"; tail -2 $R/soak.log
timeout 150 python3 -m replayssm demo > $R/demo.log 2>&1; echo "demo rc=$? at $(( $(date +%s) - S ))s"; tail -8 $R/demo.log
