# One device call on this tree (main + run6_fold_dots_fixed.patch of 2026-12-03e-h200, uncommitted): A/B of the
# folding programs' window products from their folded blocks (REPLAYSSM_VERIFY_FOLD_DOTS=1 vs =0) at T = 4, 2, 1
# (B=256) and T=4 B=128, committed states of a 12-step trace compared; then the whole GPU suite (fold dots on by
# default) and the lockstep soak at 3,000 steps.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r7; mkdir -p $R
save() { tar -czf $OUT/run7.tgz -C /tmp r7; }
export POINTS='[[4,16,256],[4,16,128],[2,16,256],[1,16,256]]'
timeout 80 env REPLAYSSM_VERIFY_FOLD_DOTS=1 OUT=$R python3 $P0/ff_probe.py fd1 --save /tmp/base.pt > $R/ab_fd1.log 2>&1; grep "^fd1:" $R/ab_fd1.log
timeout 80 env REPLAYSSM_VERIFY_FOLD_DOTS=0 OUT=$R python3 $P0/ff_probe.py fd0 --compare /tmp/base.pt > $R/ab_fd0.log 2>&1; grep "^fd0:" $R/ab_fd0.log
save
timeout 270 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
timeout 70 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1; tail -3 $R/soak.log
save
