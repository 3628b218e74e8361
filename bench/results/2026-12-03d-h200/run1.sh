# One device call on this tree: the GPU tests of the kernels (with the new reduce-scatter fold bitwise against the
# all-reduce fold and the recurrent baseline) and tests/ops/test_fold_rs.py on the GPU (small shapes, bitwise); the
# verify's fold in reduce-scatter form (REPLAYSSM_FOLD_RS=1, the default) against the all-reduce form (=0) at five
# many-wave points, outputs and committed states of a 12-step trace compared; then the official T=4 kernel bench
# with both SGLang releases (carry .peers).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r1; mkdir -p $R
save() { tar -czf $OUT/run1.tgz -C /tmp r1; }
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_real_shape.py tests/ops/test_fold_rs.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
export POINTS='[[4,16,256],[4,16,128],[1,16,256],[1,32,256],[8,16,256]]'
timeout 80 env REPLAYSSM_FOLD_RS=0 OUT=$R python3 $P0/ff_probe.py ar --save /tmp/base.pt > $R/ab_ar.log 2>&1; grep "^ar:" $R/ab_ar.log
timeout 80 env REPLAYSSM_FOLD_RS=1 OUT=$R python3 $P0/ff_probe.py rs --compare /tmp/base.pt > $R/ab_rs.log 2>&1; grep "^rs:" $R/ab_rs.log
timeout 80 env REPLAYSSM_FOLD_RS=0 OUT=$R python3 $P0/ff_probe.py ar2 --compare /tmp/base.pt > $R/ab_ar2.log 2>&1; grep "^ar2:" $R/ab_ar2.log
save
timeout 110 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 75 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -4 $R/kernels_T4.log
save
