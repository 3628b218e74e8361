# One device call: plain decode on the ring, lockstep vs spread fold phases (stagger_probe.py), B=256 and 128.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-03g-h200
R=/tmp/r1; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt 2>&1
POINTS='[[1,16,256],[1,32,256],[1,16,128]]' timeout 500 env OUT=$R python3 $D/stagger_probe.py > $R/stagger.log 2>&1
tail -25 $R/stagger.log
tar -czf $OUT/run1.tgz -C /tmp r1
