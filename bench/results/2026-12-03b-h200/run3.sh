# One device call on this tree (the one-launch verify without its META launch, its main kernel a programmatic
# dependent launch at one-wave batches): GPU tests of the kernels, the pool and the engine; the official kernel
# benches (T=4, then T=8/2/1) with both SGLang releases.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r3; mkdir -p $R
save() { tar -czf $OUT/run3.tgz -C /tmp r3; }
for t in test_kernels_real_shape.py test_pool_real_shape.py test_engine.py; do
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
done
save
timeout 110 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 75 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -6 $R/kernels_T4.log
save
timeout 300 python3 -m replayssm bench kernels --windows 8 2 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 270 --tag kernels_T821 --out $R > $R/kernels_T821.log 2>&1; tail -26 $R/kernels_T821.log
save
