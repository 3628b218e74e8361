# One device call: a sweep of the staged verify's fold-free tail (free_tail_probe.py), T=4 at B=128, 256, 64 and
# T=2, T=8 at B=128 (L=16).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-03g-h200
R=/tmp/r3; rm -rf $R; mkdir -p $R
POINTS='[[4,16,128],[4,16,256],[4,16,64],[2,16,128],[8,16,128]]' timeout 400 env OUT=$R python3 $D/free_tail_probe.py > $R/free_tail.log 2>&1
grep -v "^{" $R/free_tail.log | tail -30; grep -c '"trace_equal_to_first": true' $R/free_tail.log
tar -czf $OUT/run3.tgz -C /tmp r3
