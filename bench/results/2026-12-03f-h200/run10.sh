# One device call: A/B of prefetch (run9_pf/, pf) against the kernel as on main (run10_main/, m) in the same call,
# alternating m, pf, m, pf at T=4 (staged) B=256 and 128, L=16; pf's committed states and outputs compared with m's.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r10; mkdir -p $R
save() { tar -czf $OUT/run10.tgz -C /tmp r10; }
export POINTS='[[4,16,256],[4,16,128]]'
D=bench/results/2026-12-03f-h200
for t in pf main; do rm -rf /tmp/${t}tree && mkdir /tmp/${t}tree && cp -r replayssm /tmp/${t}tree/ && cp $D/run9_$t/*.py /tmp/${t}tree/replayssm/ops/ 2>/dev/null; done
cp $D/run10_main/*.py /tmp/maintree/replayssm/ops/
timeout 50 env TREE=/tmp/maintree OUT=$R python3 $P0/ff_probe.py m1 --save /tmp/base.pt > $R/ab_m1.log 2>&1; grep "^m1:" $R/ab_m1.log
timeout 50 env TREE=/tmp/pftree OUT=$R python3 $P0/ff_probe.py pf1 --compare /tmp/base.pt > $R/ab_pf1.log 2>&1; grep "^pf1:" $R/ab_pf1.log
timeout 50 env TREE=/tmp/maintree OUT=$R python3 $P0/ff_probe.py m2 > $R/ab_m2.log 2>&1; grep "^m2:" $R/ab_m2.log
timeout 50 env TREE=/tmp/pftree OUT=$R python3 $P0/ff_probe.py pf2 > $R/ab_pf2.log 2>&1; grep "^pf2:" $R/ab_pf2.log
save
