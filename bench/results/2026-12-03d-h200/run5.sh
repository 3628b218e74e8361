# One device call: the fold's gate and beta read one record ahead (verify_fold._fold_staged, this tree) against the
# same code without it (.ab_base: a copy of a904cfc's package, carried), A/B/A at six points; outputs and committed
# states of a 12-step trace compared with base's; then the kernels' GPU tests on this tree.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r5; mkdir -p $R
save() { tar -czf $OUT/run5.tgz -C /tmp r5; }
export POINTS='[[4,16,256],[4,16,128],[1,16,256],[1,32,256],[8,16,256],[4,16,8]]'
timeout 80 env TREE=$PWD/.ab_base OUT=$R python3 $P0/ff_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
timeout 80 env OUT=$R python3 $P0/ff_probe.py ahead --compare /tmp/base.pt > $R/ab_ahead.log 2>&1; grep "^ahead:" $R/ab_ahead.log
timeout 80 env TREE=$PWD/.ab_base OUT=$R python3 $P0/ff_probe.py base2 --compare /tmp/base.pt > $R/ab_base2.log 2>&1; grep "^base2:" $R/ab_base2.log
timeout 80 env OUT=$R python3 $P0/ff_probe.py ahead2 --compare /tmp/base.pt > $R/ab_ahead2.log 2>&1; grep "^ahead2:" $R/ab_ahead2.log
save
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $R/gpu_tests.log 2>&1; tail -2 $R/gpu_tests.log
save
