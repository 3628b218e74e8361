# One device call: a probe of staggered first-wave starts (STAGGER_NS, STAGGER_MODE: this tree's uncommitted probe,
# run1_stagger.patch) at T=4 and T=1, B=256, outputs and committed states of a 12-step trace compared with the
# unstaggered run; then the whole GPU suite (tests/gpu) and the lockstep soak at 3,000 steps.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r1; mkdir -p $R
save() { tar -czf $OUT/run1.tgz -C /tmp r1; }
export POINTS='[[4,16,256],[1,16,256]]'
timeout 70 env STAGGER_NS=0 OUT=$R python3 $P0/ff_probe.py s0 --save /tmp/base.pt > $R/ab_s0.log 2>&1; grep "^s0:" $R/ab_s0.log
for cfg in "3000 0 s3k" "6000 0 s6k" "6000 1 s6k_m1" "0 0 s0b"; do set -- $cfg
  timeout 60 env STAGGER_NS=$1 STAGGER_MODE=$2 OUT=$R python3 $P0/ff_probe.py $3 --compare /tmp/base.pt > $R/ab_$3.log 2>&1; grep "^$3:" $R/ab_$3.log
done
save
timeout 260 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
timeout 60 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1; tail -3 $R/soak.log
save
