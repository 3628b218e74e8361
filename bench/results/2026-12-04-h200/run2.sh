# One device call: per-kernel times (kprof.py) of plain decode at L=16 / 32 (B=256) and of T=4 steps at B=64 (HV=64,
# and HV=48 as the 27B engine's layers) and B=128, 256.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-04-h200
R=/tmp/r2; rm -rf $R; mkdir -p $R
POINTS='[[1,16,256,64],[1,32,256,64],[1,16,128,64],[1,32,128,64],[4,16,64,64],[4,16,64,48],[4,16,128,64],[4,16,256,64],[1,32,256,64],[1,16,256,64]]' timeout 300 env OUT=$R python3 $D/kprof.py > $R/kprof.log 2>&1
cat $R/kprof.log | cut -c1-400
tar -czf $OUT/run2.tgz -C /tmp r2
