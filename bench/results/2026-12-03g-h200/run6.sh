# One device call: the fold-free tail (free_tail_probe.py) for plain decode, now staged with the fold phase: a T=1
# folding program replays L-1 records, ~3x (L=16) to ~5x (L=32) a streaming program, so 1.5 waves may be too short.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-03g-h200
R=/tmp/r6; rm -rf $R; mkdir -p $R
POINTS='[[1,32,256],[1,16,256],[1,32,128]]' WAVES='1.5,3,5,8' timeout 300 env OUT=$R python3 $D/free_tail_probe.py > $R/free_tail.log 2>&1
grep -v "^{" $R/free_tail.log | tail -16; grep -c '"trace_equal_to_first": true' $R/free_tail.log
tar -czf $OUT/run6.tgz -C /tmp r6
