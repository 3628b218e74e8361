# One device call: base (main at dd7310f, in .base) vs the one-launch verify with the conflict-free window dots,
# bitwise-compared and timed; skip probes of the new tree; the GPU bitwise chains of the new tree.
export TRITON_CACHE_DIR=$PWD/.triton-cache/tc
P=bench/results/2026-12-02-h200
S=bench/results/2026-12-02b-h200
export POINTS='[[4,16,256],[4,16,128],[4,16,8],[1,16,256],[2,16,256],[8,16,256],[8,32,8],[4,32,256]]'
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv
timeout 190 env TREE=.base python3 $P/ab_probe.py base --save /tmp/base.pt > $OUT/ab_base.log 2>&1; grep "^base:" $OUT/ab_base.log; tail -3 $OUT/ab_base.log
timeout 190 python3 $P/ab_probe.py new --compare /tmp/base.pt > $OUT/ab_new.log 2>&1; grep "^new:" $OUT/ab_new.log; tail -3 $OUT/ab_new.log
grep -o '"checkpoint_equal_to_saved": [a-z]*\|"outputs_max_diff": [0-9.e-]*\|"max_out_err": [0-9.e-]*' $OUT/ab_new.log | paste - - - 
export POINTS='[[4,16,256],[4,16,8]]'
for s in 1 2; do REPLAYSSM_VERIFY_SKIP=$s timeout 50 python3 $S/skip_probe.py 2>&1 | grep skip; done | tee $OUT/skip.jsonl
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $OUT/gpu_tests.log 2>&1; tail -4 $OUT/gpu_tests.log
