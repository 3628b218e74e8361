# One device call: base (e6eae42, in .base) vs this tree (fold ahead with the next layer's records and state rows
# copied while a layer folds, requests fastest in the grid), a sweep of its program shapes, per-kernel times, the GPU
# tests of the kernels, the pool and the engine on this tree.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P=bench/results/2026-12-03-h200
R=/tmp/r3; mkdir -p $R
save() { tar -czf $OUT/run3.tgz -C /tmp r3; }
export POINTS='[[4,16,8],[1,16,8],[2,16,8],[1,32,8],[2,32,8]]'
timeout 100 env TREE=.base OUT=$R python3 $P/ff_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
save
timeout 100 env OUT=$R python3 $P/ff_probe.py new --compare /tmp/base.pt > $R/ab_new.log 2>&1; grep "^new:" $R/ab_new.log
save
POINTS='[[4,16,8],[1,16,8]]' FOLD_KERNEL=fold_ahead FOLD_SHAPES='[[4,1,16],[8,1,32],[2,2,16]]' timeout 80 env OUT=$R python3 $P/ff_probe.py sweep --compare /tmp/base.pt > $R/ab_sweep.log 2>&1; grep "^sweep:" $R/ab_sweep.log
save
KPOINTS='[[4,16,8]]' timeout 30 env OUT=$R python3 bench/results/2026-12-02d-h200/kprof.py new > $R/kprof.log 2>&1; grep "^new" $R/kprof.log
save
for t in test_kernels_real_shape.py test_pool_real_shape.py test_engine.py; do
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
done
save
