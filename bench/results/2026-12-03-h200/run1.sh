# One device call: base (e6eae42, in .base) vs this tree (the verify's fold in a launch of its own at one-wave
# batches, ops/verify_fold.py), a sweep of the fold launch's program shapes, per-kernel times, the GPU kernel tests.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P=bench/results/2026-12-03-h200
R=/tmp/r1; mkdir -p $R
save() { tar -czf $OUT/run1.tgz -C /tmp r1; }  # after every stage: what ran comes back even if a later one times out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > $R/gpu.txt
export POINTS='[[4,16,8],[1,16,8],[2,16,8],[1,32,8],[4,16,64]]'
timeout 140 env TREE=.base OUT=$R python3 $P/ff_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
save
timeout 140 env OUT=$R python3 $P/ff_probe.py new --compare /tmp/base.pt > $R/ab_new.log 2>&1; grep "^new:" $R/ab_new.log
save
POINTS='[[4,16,8],[1,16,8]]' FOLD_SHAPES='[[2,4,32],[8,1,32],[4,4,64],[4,1,16]]' timeout 130 env OUT=$R python3 $P/ff_probe.py sweep --compare /tmp/base.pt > $R/ab_sweep.log 2>&1; grep "^sweep:" $R/ab_sweep.log
save
KPOINTS='[[4,16,8]]' timeout 40 env OUT=$R python3 bench/results/2026-12-02d-h200/kprof.py new > $R/kprof.log 2>&1; grep "^new" $R/kprof.log
save
timeout 130 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
