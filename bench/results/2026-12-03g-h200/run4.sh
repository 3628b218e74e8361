# One device call: plain decode with the fold phase on, the verify in one launch (as landed) or staged (whose prep
# kernel orders the requests so that no fold starts in the last waves), alternated: stagger_probe.py's sync arm.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-03g-h200
R=/tmp/r4; rm -rf $R; mkdir -p $R
export POINTS='[[1,16,256],[1,32,256],[1,16,128]]' REPLAYSSM_FOLD_PHASE=1
for a in "1 a rec,sync" "0 a sync" "1 b sync" "0 b sync,rec"; do set -- $a
  mkdir -p $R/o$1$2; timeout 120 env REPLAYSSM_VERIFY_ONE_LAUNCH=$1 ARMS=$3 OUT=$R/o$1$2 python3 $D/stagger_probe.py > $R/one$1$2.log 2>&1
  grep -A12 "^T L B" $R/one$1$2.log | sed "s/^/one_launch=$1 /"
done
tar -czf $OUT/run4.tgz -C /tmp r4
