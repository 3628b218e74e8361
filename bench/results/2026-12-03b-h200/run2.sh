# One device call on this tree: the one-launch verify's main kernel as a programmatic dependent launch
# (REPLAYSSM_VERIFY_PDL=1) or not (=0: the tree of run 1's "new"), twice each, interleaved, at the one-launch points;
# outputs and committed states of a 12-step trace compared with PDL off; GPU tests of the kernels and the engine
# (CUDA graphs) with PDL on.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r2; mkdir -p $R
save() { tar -czf $OUT/run2.tgz -C /tmp r2; }
export POINTS='[[4,16,8],[2,16,8],[2,32,8],[1,16,8],[1,16,256],[1,32,256],[1,16,64]]'
timeout 120 env REPLAYSSM_VERIFY_PDL=0 OUT=$R python3 $P0/ff_probe.py pdl0 --save /tmp/base.pt > $R/ab_pdl0.log 2>&1; grep "^pdl0:" $R/ab_pdl0.log
save
timeout 120 env REPLAYSSM_VERIFY_PDL=1 OUT=$R python3 $P0/ff_probe.py pdl1 --compare /tmp/base.pt > $R/ab_pdl1.log 2>&1; grep "^pdl1:" $R/ab_pdl1.log
save
timeout 120 env REPLAYSSM_VERIFY_PDL=0 OUT=$R python3 $P0/ff_probe.py pdl0b > $R/ab_pdl0b.log 2>&1; grep "^pdl0b:" $R/ab_pdl0b.log
timeout 120 env REPLAYSSM_VERIFY_PDL=1 OUT=$R python3 $P0/ff_probe.py pdl1b > $R/ab_pdl1b.log 2>&1; grep "^pdl1b:" $R/ab_pdl1b.log
save
for t in test_kernels_real_shape.py test_engine.py; do
  timeout 120 env REPLAYSSM_VERIFY_PDL=1 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/$t >> $R/gpu_tests.log 2>&1; tail -1 $R/gpu_tests.log
done
save
