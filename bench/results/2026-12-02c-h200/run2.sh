# One device call: base (main at dd7310f, in .base) vs the one-launch verify with G by uniform loads and the old
# history layout, the window matrices (AT bit 1) and the history dots (AT bit 2) before or inside the chunk loop.
export TRITON_CACHE_DIR=$PWD/.triton-cache/tc
P=bench/results/2026-12-02-h200
export POINTS='[[4,16,256],[4,16,128],[4,16,8],[2,16,256],[8,16,256],[1,16,256]]'
timeout 150 env TREE=.base python3 $P/ab_probe.py base --save /tmp/base.pt > $OUT/ab2_base.log 2>&1; grep "^base:" $OUT/ab2_base.log
for at in 0 1 2 3; do
  REPLAYSSM_VERIFY_AT=$at timeout 150 python3 $P/ab_probe.py at$at --compare /tmp/base.pt > $OUT/ab2_at$at.log 2>&1; grep "^at$at:" $OUT/ab2_at$at.log
  grep -o '"checkpoint_equal_to_saved": [a-z]*' $OUT/ab2_at$at.log | sort | uniq -c
done
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $OUT/gpu_tests2.log 2>&1; tail -2 $OUT/gpu_tests2.log
