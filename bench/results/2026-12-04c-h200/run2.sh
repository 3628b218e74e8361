# One device call on the packed tree (the working tree): the GPU suite but the soak; the official plain-decode bench
# (T=1, L=16 and 32, B=128 and 256); then T=1, L=16, B=256 once more, base / new / base / new (run 1 had new +0.6%).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r2; rm -rf $R; mkdir -p $R
timeout 250 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
tar -czf $OUT/run2.tgz -C /tmp r2
timeout 200 python3 -m replayssm bench kernels --windows 1 --rings 16 32 --batches 128 256 --target-ms 15 --max-seconds 150 --tag kernels_T1 --out $R > $R/kernels_T1.log 2>&1; tail -12 $R/kernels_T1.log | cut -c1-220
tar -czf $OUT/run2.tgz -C /tmp r2
D=$PWD/bench/results/2026-12-04-h200
export POINTS='[[1,16,256]]'
for rep in a b; do
  (cd .base && timeout 40 env OUT=$R TAG=base TREE=$PWD python3 $D/ab_probe.py > $R/base_$rep.log 2>&1)
  timeout 40 env OUT=$R TAG=new python3 $D/ab_probe.py > $R/new_$rep.log 2>&1
done
grep -h '^{' $R/base_*.log $R/new_*.log | cut -c1-120
rm -f $R/*.pt
tar -czf $OUT/run2.tgz -C /tmp r2
