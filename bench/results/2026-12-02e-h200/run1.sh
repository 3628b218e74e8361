# One device call: base (f8ae7d4, in .base) vs this tree (p1: the staging kernel reads its history in physical order,
# two round trips instead of three); per-kernel times of both; the lazy-decay instruction-count probe (.lz, timing
# only); the GPU tests of the kernels, the pool and the engine.
export TRITON_CACHE_DIR=/tmp/tc
P=bench/results/2026-12-02-h200
Q=bench/results/2026-12-02d-h200
S=bench/results/2026-12-02e-h200
R=/tmp/r1; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[4,16,64],[2,16,256],[8,16,256],[4,32,256],[8,32,64]]'
timeout 110 env TREE=.base OUT=$R python3 $P/ab_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
timeout 110 env OUT=$R python3 $P/ab_probe.py p1 --compare /tmp/base.pt > $R/ab_p1.log 2>&1; grep "^p1:" $R/ab_p1.log
grep -ho '"checkpoint_equal_to_saved": [a-z]*' $R/ab_p1.log | sort | uniq -c
grep -ho '"outputs_equal_to_saved": [a-z]*' $R/ab_p1.log | sort | uniq -c
export KPOINTS='[[4,16,256],[4,16,128],[8,16,256],[2,16,256]]'
timeout 50 env TREE=.base OUT=$R python3 $Q/kprof.py base > $R/kprof.log 2>&1
timeout 50 env OUT=$R python3 $Q/kprof.py p1 >> $R/kprof.log 2>&1; grep ": T=" $R/kprof.log
POINTS='[[4,16,256],[1,16,256]]' timeout 60 env TREE=.lz OUT=$R python3 $S/lazy_time.py lz > $R/lazy.log 2>&1
POINTS='[[4,16,256],[1,16,256]]' timeout 60 env OUT=$R python3 $S/lazy_time.py p1 >> $R/lazy.log 2>&1; grep "^lz:\|^p1:" $R/lazy.log | cut -c1-400
for t in test_kernels_real_shape.py test_pool_real_shape.py test_engine.py; do
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
done
tar -czf $OUT/run1.tgz -C /tmp r1; ls $R
