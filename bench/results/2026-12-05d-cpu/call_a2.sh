# call_a.sh for what is left of a session's device minutes (LIMIT seconds, default 330): the DIF A/B base / m2 /
# base / m2 at T=4, L=16, B=256 and 128 (traces of m2 torch.equal to base's), decide.py, and if m2 wins and time is
# left, issue 10's official T=4 run with it. No profile.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s); LIM=${LIMIT:-330}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
P=$PWD/bench/results/2026-12-04-h200
R=/tmp/c1; rm -rf $R; mkdir -p $R
export POINTS=${POINTS:-'[[4,16,256],[4,16,128]]'}
arm() { timeout 75 env OUT=$R TAG=$1 TREE=$PWD REPLAYSSM_VERIFY_DIF=$3 python3 $P/ab_probe.py > $R/$1_$2.log 2>&1; echo "$1 $2 rc=$? at $(( $(date +%s) - S ))s"; }
arm base a 0; arm m2 a 2; arm base b 0; arm m2 b 2
OUT=$R python3 $P/ab_probe.py --compare base m2; echo "compare m2 rc=$?"
python3 bench/results/2026-12-04e-cpu/ab_table.py $R base m2 | tee $OUT/ab_table.txt
rm -f $R/*.pt; mkdir -p $OUT/ab; cp $R/* $OUT/ab/
left=$(( LIM - ($(date +%s) - S) ))
if python3 bench/results/2026-12-05d-cpu/decide.py $R | tee $OUT/decide.txt && [ $left -gt 100 ]; then
  timeout $(( left - 10 )) env REPLAYSSM_VERIFY_DIF=2 python3 -m replayssm bench kernels --windows 4 --rings 16 \
    --batches 256 128 64 8 --target-ms 15 --max-seconds $(( left - 60 )) --tag kernels_T4_m2 --out $OUT \
    --peers-dir .peers > $OUT/kernels_T4_m2.log 2>&1
  echo "bench kernels m2 rc=$? at $(( $(date +%s) - S ))s"; tail -7 $OUT/kernels_T4_m2.log | cut -c1-220
fi
