# One device call: the official plain-decode bench with a three-wave fold-free tail at T=1 (verify_launch.
# FOLD_FREE_WAVES_DECODE), both SGLang releases (carry .peers); then the kernels' GPU tests of the fold phase.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r7; rm -rf $R; mkdir -p $R
timeout 110 python3 -m replayssm bench kernels --windows 1 --rings 16 32 --batches 128 256 --target-ms 15 --max-seconds 90 --tag kernels_T1 --out $R > $R/kernels_T1.log 2>&1; tail -5 $R/kernels_T1.log | cut -c1-200
tar -czf $OUT/run7.tgz -C /tmp r7
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_real_shape.py -k "fold_phase or verify_matches" > $R/gpu_tests.log 2>&1; tail -2 $R/gpu_tests.log
tar -czf $OUT/run7.tgz -C /tmp r7
