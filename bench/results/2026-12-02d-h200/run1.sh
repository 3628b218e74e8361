# One device call: base (main at 6baf4ff, its replayssm/ in .base) vs this tree (swizzled window vectors in the
# staging kernel's history dots and the main kernel's tensor-core operand; PDL between the two launches of a
# staged verify) with REPLAYSSM_VERIFY_PDL=0 and =1; per-kernel times; the real-shape GPU tests. Packed into
# $OUT/run1.tgz (the 8-file limit).
export TRITON_CACHE_DIR=/tmp/tc
P=bench/results/2026-12-02-h200
Q=bench/results/2026-12-02d-h200
R=/tmp/r1; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[8,16,256],[2,16,256],[4,16,8],[8,16,8],[4,32,8],[2,16,64]]'
timeout 120 env TREE=.base OUT=$R python3 $P/ab_probe.py base --save /tmp/base.pt > $R/ab_base.log 2>&1; grep "^base:" $R/ab_base.log
timeout 120 env REPLAYSSM_VERIFY_PDL=0 OUT=$R python3 $P/ab_probe.py swz --compare /tmp/base.pt > $R/ab_swz.log 2>&1; grep "^swz:" $R/ab_swz.log
timeout 120 env REPLAYSSM_VERIFY_PDL=1 OUT=$R python3 $P/ab_probe.py pdl --compare /tmp/base.pt > $R/ab_pdl.log 2>&1; grep "^pdl:" $R/ab_pdl.log
grep -ho '"checkpoint_equal_to_saved": [a-z]*' $R/ab_swz.log $R/ab_pdl.log | sort | uniq -c
grep -ho '"outputs_max_diff": [0-9.e-]*' $R/ab_swz.log $R/ab_pdl.log | sort | uniq -c | sort -k3 | tail -3
export KPOINTS='[[4,16,256],[8,16,256],[4,16,8],[8,16,8]]'
timeout 60 env TREE=.base OUT=$R python3 $Q/kprof.py base > $R/kprof.log 2>&1
timeout 60 env REPLAYSSM_VERIFY_PDL=0 OUT=$R python3 $Q/kprof.py swz >> $R/kprof.log 2>&1
timeout 60 env REPLAYSSM_VERIFY_PDL=1 OUT=$R python3 $Q/kprof.py pdl >> $R/kprof.log 2>&1
grep ": T=" $R/kprof.log
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
tar -czf $OUT/run1.tgz -C /tmp r1; ls $R
