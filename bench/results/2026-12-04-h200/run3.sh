# One device call: the verify's checkpoint chunks (warps_probe.py with (warps, rows/thread, regs, stages, k_chunk)):
# default (2 chunks of 32 columns) against 3 x 16 and 2 x 16, plain decode B=256 at L=32 and 16, T=4 B=128 / 256.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-04-h200
R=/tmp/r3; rm -rf $R; mkdir -p $R
CONFIGS='[[4,4,128,2,32],[4,4,128,3,16],[4,4,128,2,16],[4,4,128,2,32],[4,4,128,3,16],[4,4,128,2,16]]' POINTS='[[1,32,256],[1,16,256],[1,32,128],[4,16,256],[4,16,128],[4,32,256],[2,32,256]]' timeout 560 env OUT=$R python3 $D/warps_probe.py > $R/chunks.log 2>&1
grep -v "^{" $R/chunks.log | tail -48; grep -c '"committed_equal": true' $R/chunks.log; grep '"committed_equal": false' $R/chunks.log | head
tar -czf $OUT/run3.tgz -C /tmp r3
