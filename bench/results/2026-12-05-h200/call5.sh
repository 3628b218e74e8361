# Device call 5 of 2026-12-05: the fold-first verify (REPLAYSSM_VERIFY_FOLD_FIRST=1, verify_fold_first) against the
# same tree without it: base / ff / base / ff at five points (ab_probe.py; traces: committed states torch.equal,
# outputs close, ff_compare.py), then the GPU suite but the soak with fold first forced, plus its CPU test file.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-05-h200
P=$PWD/bench/results/2026-12-04-h200
R=/tmp/c5; rm -rf $R; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[1,16,256],[1,32,256],[2,16,256]]'
for rep in a b; do
  timeout 130 env OUT=$R TAG=base TREE=$PWD REPLAYSSM_VERIFY_FOLD_FIRST=0 python3 $P/ab_probe.py > $R/base_$rep.log 2>&1
  timeout 130 env OUT=$R TAG=ff TREE=$PWD REPLAYSSM_VERIFY_FOLD_FIRST=1 python3 $P/ab_probe.py > $R/ff_$rep.log 2>&1
done
OUT=$R python3 $D/ff_compare.py base ff; echo "compare rc=$?"
python3 bench/results/2026-12-04e-cpu/ab_table.py $R base ff
rm -f $R/*.pt; tar -czf $OUT/call5.tgz -C /tmp c5
REPLAYSSM_VERIFY_FOLD_FIRST=1 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu \
  --deselect tests/gpu/test_soak.py tests/ops/test_fold_first.py > $R/gpu_tests_ff.log 2>&1
echo "gpu tests (fold first) rc=$?"; tail -4 $R/gpu_tests_ff.log
tar -czf $OUT/call5.tgz -C /tmp c5
