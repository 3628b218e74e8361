# One device call: the verify's launch shape at many-wave batches, A/B in one call: whole-head programs (128 rows, two
# 64-row fold blocks, the default) against 64-row programs (one fold block each) and 64-row programs of two 32-row
# blocks; outputs and committed states of a 12-step trace compared with the default's.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r4; mkdir -p $R
save() { tar -czf $OUT/run4.tgz -C /tmp r4; }
export POINTS='[[4,16,256],[4,16,128],[1,16,256],[8,16,256]]' FOLD_KERNEL=verify
timeout 120 env OUT=$R python3 $P0/ff_probe.py d --save /tmp/base.pt > $R/ab_d.log 2>&1; grep "^d:" $R/ab_d.log
save
timeout 150 env FOLD_SHAPES='[[4,4,64],[4,2,64]]' OUT=$R python3 $P0/ff_probe.py s64 --compare /tmp/base.pt > $R/ab_s64.log 2>&1; grep "^s64:" $R/ab_s64.log
save
timeout 120 env OUT=$R python3 $P0/ff_probe.py d2 --compare /tmp/base.pt > $R/ab_d2.log 2>&1; grep "^d2:" $R/ab_d2.log
save
