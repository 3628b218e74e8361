# One device call: the tensor-core fold probe (tc_fold_probe.py): today's pinned fold loop against a chunked,
# per-step fold whose rank-t update runs on tensor cores, at B=256 (and 64), 12 records in steps of 1-4.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=/tmp/r3; mkdir -p $R
save() { tar -czf $OUT/run3.tgz -C /tmp r3; }
timeout 400 python3 bench/results/2026-12-03e-h200/tc_fold_probe.py --out $R > $R/tc_fold_probe.log 2>&1; tail -8 $R/tc_fold_probe.log
save
