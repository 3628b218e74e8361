# One device call on this tree (fold ahead for windows of 2 to 4 tokens at one-wave batches): the fold-ahead grid's
# order (requests fastest, the default, vs a request's programs consecutive) at B=8; the fold-ahead GPU chains; the
# official kernel benches (T=4, then T=8/2/1) with both SGLang releases.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P=bench/results/2026-12-03-h200
R=/tmp/r4; mkdir -p $R
save() { tar -czf $OUT/run4.tgz -C /tmp r4; }
export POINTS='[[4,16,8],[2,16,8],[2,32,8]]'
timeout 50 env OUT=$R python3 $P/ff_probe.py fastest > $R/ab_fastest.log 2>&1; grep "^fastest:" $R/ab_fastest.log
timeout 50 env OUT=$R FOLD_ORDER=contiguous python3 $P/ff_probe.py contiguous > $R/ab_contiguous.log 2>&1; grep "^contiguous:" $R/ab_contiguous.log
save
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py -k fold_ahead > $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
save
timeout 110 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 75 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -6 $R/kernels_T4.log
save
timeout 300 python3 -m replayssm bench kernels --windows 8 2 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 280 --tag kernels_T821 --out $R > $R/kernels_T821.log 2>&1; tail -26 $R/kernels_T821.log
save
