# One device call: data_probe.py (the landed tree; states random, NaN, zero) with nvidia-smi sampling SM clock and
# power every 100 ms.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r9; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > $R/smi.csv 2>&1 &
SMI=$!
timeout 200 env OUT=$R python3 $D/data_probe.py > $R/data.log 2>&1
kill $SMI
cut -c1-230 $R/data.log | grep "^{" ; wc -l $R/smi.csv; sort -t, -k2 -n $R/smi.csv | awk -F, 'NR%20==1{print $2, $3}' | head -20
tar -czf $OUT/run9.tgz -C /tmp r9
