# One device call: per-kernel times (../2026-12-04-h200/kprof.py) with the L2 prefetch off, on (plain, and
# evict-last) and with its rank computed but nothing prefetched (waves 0), T=1 L=32 B=256 and T=4 L=16 B=128.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-04-h200
R=/tmp/r2; rm -rf $R; mkdir -p $R
export POINTS='[[1,32,256,64],[4,16,128,64]]'
for v in "0 1" "1 1" "1 0" "2 1" "0 1"; do set -- $v
  echo "== L2PF=$1 waves=$2"
  timeout 100 env OUT=$R REPLAYSSM_VERIFY_L2PF=$1 REPLAYSSM_VERIFY_L2PF_WAVES=$2 python3 $D/kprof.py 2>&1 | cut -c1-300
  mv $R/kprof.json $R/kprof_$1_$2_$RANDOM.json
done
tar -czf $OUT/run2.tgz -C /tmp r2
