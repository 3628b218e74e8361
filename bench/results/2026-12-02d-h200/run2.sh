# One device call: base (6baf4ff, in .base) vs this tree (v2: one swizzled [2BT, K] buffer of window vectors in the
# staging kernel, BT rows per pattern; swizzled window vectors in the main kernel's tensor-core path, both ways);
# staging with 2 warps (probe); per-kernel times; GPU tests; the official T=4 kernel bench with both SGLang releases.
export TRITON_CACHE_DIR=/tmp/tc
P=bench/results/2026-12-02-h200
Q=bench/results/2026-12-02d-h200
R=/tmp/r2; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[8,16,256],[2,16,256],[4,16,8],[8,16,8],[4,32,8],[4,32,256]]'
timeout 100 env TREE=.base OUT=$R python3 $P/ab_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
timeout 100 env OUT=$R python3 $P/ab_probe.py v2 --compare /tmp/base.pt > $R/ab_v2.log 2>&1; grep "^v2:" $R/ab_v2.log
grep -ho '"checkpoint_equal_to_saved": [a-z]*' $R/ab_v2.log | sort | uniq -c
grep -ho '"outputs_equal_to_saved": [a-z]*' $R/ab_v2.log | sort | uniq -c
POINTS='[[4,16,256],[4,16,128],[8,16,256]]' timeout 60 env REPLAYSSM_PREP_WARPS=2 OUT=$R python3 $P/ab_probe.py w2 --compare /tmp/base.pt > $R/ab_w2.log 2>&1; grep "^w2:" $R/ab_w2.log
export KPOINTS='[[4,16,256],[4,16,128],[8,16,256],[4,16,8],[8,16,8]]'
timeout 60 env OUT=$R python3 $Q/kprof.py v2 > $R/kprof.log 2>&1; grep ": T=" $R/kprof.log
for t in test_kernels_real_shape.py test_pool_real_shape.py test_engine.py; do
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
done
timeout 100 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 75 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -8 $R/kernels_T4.log
tar -czf $OUT/run2.tgz -C /tmp r2; ls $R
