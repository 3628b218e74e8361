# One device call: base (f8ae7d4, in .base) vs o1 (.o1: the staging kernel orders the requests so that no folding
# request starts in the last 1.5 waves of the main kernel, folds spread evenly over the rest) vs this tree (x1: o1,
# and the staged X holds the window's queries only, the main kernel reading the window's keys from the ring); the
# GPU tests of the kernels, the pool and the engine on this tree.
export TRITON_CACHE_DIR=/tmp/tc
P=bench/results/2026-12-02-h200
R=/tmp/r2; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[4,16,64],[2,16,256],[8,16,256],[4,32,256],[8,32,64],[2,32,128]]'
timeout 120 env TREE=.base OUT=$R python3 $P/ab_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
timeout 120 env TREE=.o1 OUT=$R python3 $P/ab_probe.py o1 --compare /tmp/base.pt > $R/ab_o1.log 2>&1; grep "^o1:" $R/ab_o1.log
timeout 120 env OUT=$R python3 $P/ab_probe.py x1 --compare /tmp/base.pt > $R/ab_x1.log 2>&1; grep "^x1:" $R/ab_x1.log
grep -ho '"checkpoint_equal_to_saved": [a-z]*' $R/ab_o1.log $R/ab_x1.log | sort | uniq -c
grep -ho '"outputs_equal_to_saved": [a-z]*' $R/ab_o1.log $R/ab_x1.log | sort | uniq -c
POINTS='[[4,16,256],[4,16,128]]' timeout 60 env TREE=.base OUT=$R python3 $P/ab_probe.py base2 > $R/ab_base2.log 2>&1; grep "^base2:" $R/ab_base2.log
for t in test_kernels_real_shape.py test_pool_real_shape.py test_engine.py; do
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
done
tar -czf $OUT/run2.tgz -C /tmp r2; ls $R
