# One device call (carry .peers): the fold phase (ring_commit(fold_phase=...), fold_phase_pays) off / on / off / on
# at T=1 (stagger_probe.py's rec and sync arms; REPLAYSSM_FOLD_PHASE forces it), the official plain-decode bench with
# both SGLang releases, then the GPU suite but the soak.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-03g-h200
R=/tmp/r2; mkdir -p $R
save() { tar -czf $OUT/run2.tgz -C /tmp r2; }
export POINTS='[[1,16,256],[1,32,256],[1,16,128],[1,16,64],[1,16,8]]'
for a in "0 rec,sync" "1 sync" "0 sync" "1 sync,rec"; do set -- $a
  mkdir -p $R/p$1_$2; timeout 120 env REPLAYSSM_FOLD_PHASE=$1 ARMS=$2 OUT=$R/p$1_$2 python3 $D/stagger_probe.py > $R/phase$1_$2.log 2>&1
  grep -A30 "^T L B" $R/phase$1_$2.log | sed "s/^/phase=$1 /"
done
save
timeout 200 python3 -m replayssm bench kernels --windows 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 150 --tag kernels_T1 --out $R > $R/kernels_T1.log 2>&1; tail -10 $R/kernels_T1.log | cut -c1-200
save
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
