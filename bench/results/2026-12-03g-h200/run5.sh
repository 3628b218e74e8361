# One device call (carry .peers): plain decode staged over many waves (verify_launch.many_waves) with the fold phase:
# the GPU suite but the soak, then the official plain-decode and T=4 benches with both SGLang releases.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r5; rm -rf $R; mkdir -p $R
save() { tar -czf $OUT/run5.tgz -C /tmp r5; }
timeout 150 python3 -m replayssm bench kernels --windows 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 120 --tag kernels_T1 --out $R > $R/kernels_T1.log 2>&1; tail -9 $R/kernels_T1.log | cut -c1-200
save
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
timeout 130 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 75 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -5 $R/kernels_T4.log | cut -c1-200
save
