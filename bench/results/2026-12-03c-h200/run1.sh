# One device call on this tree: GPU tests of the kernels (the previous session's unrun PDL test, the new prefetch
# test), then the main kernel's L2 prefetch (REPLAYSSM_VERIFY_PREFETCH rows ahead) A/B at six many-wave points;
# outputs and committed states of a 12-step trace compared with prefetch off.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r1; mkdir -p $R
save() { tar -czf $OUT/run1.tgz -C /tmp r1; }
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
export POINTS='[[4,16,256],[1,16,256],[1,32,256],[4,16,128],[2,16,256],[8,16,256]]'
timeout 90 env REPLAYSSM_VERIFY_PREFETCH=0 OUT=$R python3 $P0/ff_probe.py pf0 --save /tmp/base.pt > $R/ab_pf0.log 2>&1; grep "^pf0:" $R/ab_pf0.log
save
for pf in 4 2 8 12; do
  timeout 80 env REPLAYSSM_VERIFY_PREFETCH=$pf OUT=$R python3 $P0/ff_probe.py pf$pf --compare /tmp/base.pt > $R/ab_pf$pf.log 2>&1; grep "^pf$pf:" $R/ab_pf$pf.log
  save
done
timeout 70 env REPLAYSSM_VERIFY_PREFETCH=0 OUT=$R python3 $P0/ff_probe.py pf0b > $R/ab_pf0b.log 2>&1; grep "^pf0b:" $R/ab_pf0b.log
save
