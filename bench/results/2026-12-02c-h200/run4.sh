# One device call at the hybrid verify (one launch for T <= 2 and one-wave T <= 4 batches, staged otherwise): A/B
# against base (main at 0ce68f3's replayssm/, in .base), the GPU tests, the official kernel bench. Packed into
# $OUT/run4.tgz (the 8-file limit).
export TRITON_CACHE_DIR=$PWD/.triton-cache/tc
P=bench/results/2026-12-02-h200
R=/tmp/r4; mkdir -p $R
export POINTS='[[1,16,256],[1,32,256],[2,16,256],[2,32,256],[4,16,8],[1,16,8],[4,16,256]]'
timeout 110 env TREE=.base OUT=$R python3 $P/ab_probe.py base --save /tmp/base.pt > $R/ab4_base.log 2>&1; grep "^base:" $R/ab4_base.log | sort -u
timeout 110 env OUT=$R python3 $P/ab_probe.py new --compare /tmp/base.pt > $R/ab4_new.log 2>&1; grep "^new:" $R/ab4_new.log | sort -u
grep -o '"checkpoint_equal_to_saved": [a-z]*' $R/ab4_new.log | sort | uniq -c
for t in test_kernels_real_shape.py test_pool_real_shape.py test_engine.py; do
  timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> $R/gpu_tests4.log 2>&1; tail -1 $R/gpu_tests4.log
done
timeout 90 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 75 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -14 $R/kernels_T4.log
timeout 200 python3 -m replayssm bench kernels --windows 8 2 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 180 --tag kernels_T821 --out $R > $R/kernels_T821.log 2>&1; tail -30 $R/kernels_T821.log
tar -czf $OUT/run4.tgz -C /tmp r4; ls $R
