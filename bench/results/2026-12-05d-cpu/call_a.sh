# The twenty-eighth session's first device call (H200): (1) the DIF A/B reduced to what the H100 left open, base /
# m2 / base / m2 / m1 at T=4 L=16 B=256 and 128 (traces of m1 and m2 torch.equal to base's; ../2026-12-04-h200/
# ab_probe.py); (2) the e2e kernel-category profile of ../2026-12-05b-cpu/next_call4.sh (replay C=256 and C=64,
# recurrent C=64; 27B geometry, random bf16 weights, 1,024 tokens of context) in the time left.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt; git log --oneline -1 >> $OUT/gpu.txt
P=$PWD/bench/results/2026-12-04-h200
R=/tmp/c1; rm -rf $R; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128]]'
arm() { timeout 70 env OUT=$R TAG=$1 TREE=$PWD REPLAYSSM_VERIFY_DIF=$3 python3 $P/ab_probe.py > $R/$1_$2.log 2>&1; echo "$1 $2 rc=$?"; }
arm base a 0; arm m2 a 2; arm base b 0; arm m2 b 2; arm m1 a 1
for t in m1 m2; do OUT=$R python3 $P/ab_probe.py --compare base $t; echo "compare $t rc=$?"; done
python3 bench/results/2026-12-04e-cpu/ab_table.py $R base m2 m1 | tee $OUT/ab_table.txt
rm -f $R/*.pt; mkdir -p $OUT/ab; cp $R/* $OUT/ab/
# (3) if m2 wins, issue 10's official T=4 run with it (REPLAYSSM_VERIFY_DIF=2 takes the path a default of 2 at L=16
# would take; the T=2 and T=8 runs do not reach it), as ../2026-12-04c-h200/run3.sh ran it
if python3 bench/results/2026-12-05d-cpu/decide.py $R | tee $OUT/decide.txt; then
  timeout 200 env REPLAYSSM_VERIFY_DIF=2 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 \
    --target-ms 15 --max-seconds 150 --tag kernels_T4_m2 --out $OUT --peers-dir .peers > $OUT/kernels_T4_m2.log 2>&1
  echo "bench kernels m2 rc=$? at $(( $(date +%s) - S ))s"; tail -8 $OUT/kernels_T4_m2.log
fi
R4=/tmp/c4; rm -rf $R4; mkdir -p $R4
# one process per point (the 2026-12-01e profile ran out of memory on its second point in one process)
for pt in replay:64 recurrent:64 replay:256; do
  left=$(( ${LIMIT:-585} - ($(date +%s) - S) )); [ $left -lt 40 ] && break
  d=$R4/${pt/:/_}; mkdir -p $d
  timeout $left env OUT=$d CONTEXT=1024 PROF=$pt python3 bench/results/2026-12-03d-h200/prof_e2e.py > $d/prof.log 2>&1
  echo "prof $pt rc=$? at $(( $(date +%s) - S ))s"; grep -A14 "^==" $d/prof.log | head -16
done
mkdir -p $OUT/prof; cp -r $R4/* $OUT/prof/
