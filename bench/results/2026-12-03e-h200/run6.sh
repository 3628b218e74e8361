# One device call on this tree: a folding program's window products from its folded blocks (REPLAYSSM_VERIFY_FOLD_DOTS,
# on by default in staged launches of T <= 4; off = the previous kernel, its sm_90 SASS byte-identical to 6e8bc0b's):
# A/B on/off at T=4 and T=2, B=256 (committed states of a 12-step trace compared), then the kernels' GPU tests.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r6; mkdir -p $R
save() { tar -czf $OUT/run6.tgz -C /tmp r6; }
export POINTS='[[4,16,256],[2,16,256]]'
timeout 60 env REPLAYSSM_VERIFY_FOLD_DOTS=1 OUT=$R python3 $P0/ff_probe.py fd1 --save /tmp/base.pt > $R/ab_fd1.log 2>&1; grep "^fd1:" $R/ab_fd1.log
timeout 60 env REPLAYSSM_VERIFY_FOLD_DOTS=0 OUT=$R python3 $P0/ff_probe.py fd0 --compare /tmp/base.pt > $R/ab_fd0.log 2>&1; grep "^fd0:" $R/ab_fd0.log
save
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $R/gpu_tests.log 2>&1; tail -2 $R/gpu_tests.log
save
