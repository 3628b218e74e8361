# Device call: the GPU suite with the fold-last tests (tests/gpu/test_fold_last_gpu.py; .peers carried for the peer
# tests), then the official kernel bench with the switch on, if run2's A/B says it pays. About 6 minutes on an H200.
#   REPLAYSSM_COMMIT=<hash> bash bench/results/2026-12-05j-h200/run3.sh    (run with carry [".peers", ".whl"])
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu tests/gpu --deselect tests/gpu/test_soak.py -rfEs \
  > $OUT/gpu_tests.log 2>&1; tail -3 $OUT/gpu_tests.log
