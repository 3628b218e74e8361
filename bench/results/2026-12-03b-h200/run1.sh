# One device call: base (cc131ac, in .base) vs this tree (the one-launch verify without its META launch: each main
# program reads its row's slot, window and cursors itself) at the one-launch points; per-kernel times; the GPU tests
# of the kernels, the pool, the engine and the 5,000-step lockstep soak (folds ahead at every commit) on this tree.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r1; mkdir -p $R
save() { tar -czf $OUT/run1.tgz -C /tmp r1; }
export POINTS='[[4,16,8],[2,16,8],[2,32,8],[1,16,8],[1,16,256],[1,32,256],[1,16,64]]'
timeout 120 env TREE=.base OUT=$R python3 $P0/ff_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
save
timeout 120 env OUT=$R python3 $P0/ff_probe.py new --compare /tmp/base.pt > $R/ab_new.log 2>&1; grep "^new:" $R/ab_new.log
save
KPOINTS='[[4,16,8],[1,16,256]]' timeout 40 env OUT=$R python3 bench/results/2026-12-02d-h200/kprof.py new > $R/kprof.log 2>&1; grep "^new" $R/kprof.log
save
for t in test_kernels_real_shape.py test_pool_real_shape.py test_engine.py; do
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
done
save
REPLAYSSM_SOAK_STEPS=5000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -s tests/gpu/test_soak.py > $R/soak.log 2>&1; tail -3 $R/soak.log
save
