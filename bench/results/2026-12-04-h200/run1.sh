# One device call: the verify's main kernel at 8 warps per program (warps_probe.py): T=4 B=256 (random, non-flush,
# flush), T=4 B=128, T=2 / T=8 B=256, plain decode B=256 at L=16 and 32.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-04-h200
R=/tmp/r1; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $R/gpu.txt 2>&1
POINTS='[[4,16,256],[4,16,128],[1,16,256],[1,32,256],[2,16,256],[8,16,256]]' timeout 560 env OUT=$R python3 $D/warps_probe.py > $R/warps.log 2>&1
grep -v "^{" $R/warps.log | tail -40; grep -c '"committed_equal": true' $R/warps.log; grep '"committed_equal": false' $R/warps.log | head
tar -czf $OUT/run1.tgz -C /tmp r1
