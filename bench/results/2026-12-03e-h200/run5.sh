# One device call: (1) the pure-flush verify with its folding programs skipping their window (PROBE_SKIPW=1, this
# tree's uncommitted probe run5_skipw.patch; outputs wrong by design, timing only, committed states compared);
# (2) the standalone pinned fold with a whole head per program (two blocks in turn, as the verify) against 64-row
# programs (tc_fold_probe.py, PINNED_ONLY=1).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-03e-h200
R=/tmp/r5; mkdir -p $R
save() { tar -czf $OUT/run5.tgz -C /tmp r5; }
export POINTS='[[4,16,256],[1,16,256]]'
timeout 70 env OUT=$R python3 bench/results/2026-12-03-h200/ff_probe.py w --save /tmp/base.pt > $R/ab_w.log 2>&1; grep "^w:" $R/ab_w.log
timeout 70 env PROBE_SKIPW=1 GATE_BYPASS=1 OUT=$R python3 bench/results/2026-12-03-h200/ff_probe.py skipw --compare /tmp/base.pt > $R/ab_skipw.log 2>&1; grep "^skipw:" $R/ab_skipw.log
save
timeout 150 env PINNED_ONLY=1 python3 $D/tc_fold_probe.py --out $R > $R/pinned_probe.log 2>&1; tail -4 $R/pinned_probe.log
save
