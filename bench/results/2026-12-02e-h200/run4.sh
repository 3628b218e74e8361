# One device call: base (027fc16, in .base: the staged verify ordered, the one-launch verify in batch order) vs this
# tree (m1: the one-launch verify's META launch orders the requests the same way, one program per request); the GPU
# tests of the kernels; the official T=1 kernel bench with both SGLang releases (device time left: 380 s).
export TRITON_CACHE_DIR=/tmp/tc
P=bench/results/2026-12-02-h200
R=/tmp/r4; mkdir -p $R
export POINTS='[[1,16,256],[1,32,256],[1,16,64],[4,16,8],[1,16,8]]'
timeout 70 env TREE=.base OUT=$R python3 $P/ab_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
timeout 70 env OUT=$R python3 $P/ab_probe.py m1 --compare /tmp/base.pt > $R/ab_m1.log 2>&1; grep "^m1:" $R/ab_m1.log
grep -ho '"checkpoint_equal_to_saved": [a-z]*\|"outputs_equal_to_saved": [a-z]*' $R/ab_m1.log | sort | uniq -c
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
tar -czf $OUT/run4a.tgz -C /tmp r4
timeout 110 python3 -m replayssm bench kernels --windows 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 80 --tag kernels_T1 --out $R > $R/kernels_T1.log 2>&1; tail -10 $R/kernels_T1.log
tar -czf $OUT/run4.tgz -C /tmp r4; ls $R
