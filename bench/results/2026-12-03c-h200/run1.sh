# One device call on this tree: GPU tests of the kernels (the previous session's unrun PDL test, the new prefetch
# tests); the main kernel's L2 prefetch (REPLAYSSM_VERIFY_PREFETCH rows ahead) A/B at three many-wave points, its
# outputs and committed states over a 12-step trace compared with prefetch off; then the distance with the lowest
# sum of random-step times becomes the default (PREFETCH_ROWS, edited in this copy of the tree) for the official
# kernel bench with both SGLang releases (carry .peers).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r1; mkdir -p $R
save() { tar -czf $OUT/run1.tgz -C /tmp r1; }
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_kernels_real_shape.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
save
export POINTS='[[4,16,256],[1,16,256],[1,32,256]]'
timeout 60 env REPLAYSSM_VERIFY_PREFETCH=0 OUT=$R python3 $P0/ff_probe.py pf0 --save /tmp/base.pt > $R/ab_pf0.log 2>&1; grep "^pf0:" $R/ab_pf0.log
for pf in 4 8; do
  timeout 50 env REPLAYSSM_VERIFY_PREFETCH=$pf OUT=$R python3 $P0/ff_probe.py pf$pf --compare /tmp/base.pt > $R/ab_pf$pf.log 2>&1; grep "^pf$pf:" $R/ab_pf$pf.log
done
save
BEST=$(python3 - <<'PY'
import json, glob
best = {}
for f in glob.glob("/tmp/r1/ab_pf*.json"):
    rows = json.load(open(f))
    if any(r.get("outputs_equal_to_saved") is False or r.get("checkpoint_equal_to_saved") is False for r in rows):
        continue
    if len(rows) == 3 and all(r["gate"]["passed"] for r in rows):
        best[int(rows[0]["tag"][2:])] = sum(r["replay_random_us"] for r in rows)
print(min(best, key=best.get) if best else 0)
PY
)
echo "best prefetch rows: $BEST" | tee $R/best.txt
sed -i "s/^PREFETCH_ROWS = 0 /PREFETCH_ROWS = $BEST /" replayssm/ops/l2_prefetch.py; grep "^PREFETCH_ROWS" replayssm/ops/l2_prefetch.py | tee -a $R/best.txt
timeout 100 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 20 --max-seconds 75 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -4 $R/kernels_T4.log
save
timeout 290 python3 -m replayssm bench kernels --windows 8 2 1 --rings 16 32 --batches 8 64 128 256 --target-ms 15 --max-seconds 270 --tag kernels_T821 --out $R > $R/kernels_T821.log 2>&1; tail -4 $R/kernels_T821.log
save
