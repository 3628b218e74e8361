# Device call 6 of 2026-12-05: per-kernel times of frozen pure-flush and non-flush steps (T=4, L=16, B=256), with
# and without fold first: where the fold-first step's time goes.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-05-h200
for ff in 0 1; do OUT=$OUT REPLAYSSM_VERIFY_FOLD_FIRST=$ff timeout 120 python3 $D/kprof_flush.py ff$ff; done
