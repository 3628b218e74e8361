# One device call: the staging kernel at 1, 2, 4 warps a program (prepw_probe.py), plain decode and T=4.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r10; rm -rf $R; mkdir -p $R
POINTS='[[1,32,256],[1,16,256],[1,32,128],[4,16,256],[4,16,128]]' timeout 200 env OUT=$R python3 $D/prepw_probe.py > $R/prepw.log 2>&1
grep -c '"trace_equal_to_first": true' $R/prepw.log; grep -v "^{" $R/prepw.log | tail -8
tar -czf $OUT/run10.tgz -C /tmp r10
