# Thirtieth session, first device call (H200): issue 15's per-category profile of engine steps (27B geometry, random
# bf16 weights, 1,024 tokens of context, T=4, 3.0 accepted), one process per point, the peak point first: replay C=256
# (the peak row's 107 ms step against a 65 ms floor), plain C=256, then replay and recurrent at C=64.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
S=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
R4=/tmp/c4; rm -rf $R4; mkdir -p $R4
for pt in ${POINTS:-replay:256 plain:256 replay:64 recurrent:64}; do
  left=$(( ${LIMIT:-570} - ($(date +%s) - S) )); [ $left -lt 40 ] && break
  d=$R4/${pt/:/_}; mkdir -p $d
  timeout $left env OUT=$d CONTEXT=1024 PROF=$pt python3 bench/results/2026-12-03d-h200/prof_e2e.py > $d/prof.log 2>&1
  echo "prof $pt rc=$? at $(( $(date +%s) - S ))s"; grep -A30 "^==" $d/prof.log | head -32
  mkdir -p $OUT/prof; cp -r $d $OUT/prof/
done
