# Device call 1 of 2026-12-05 (the first GPU session in four): the 4-K-lane fold tree (HEAD + fold_pairs.patch) through
# the GPU suite (bitwise chains included), the 3,000-step lockstep soak and `replayssm demo`. The patched tree is HEAD
# plus the fold change, so a pass also covers the three sessions of HEAD's engine, pool, op and CLI changes that
# have not run on a GPU. About 7 minutes.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04e-cpu
R=/tmp/c1; rm -rf $R /tmp/new; mkdir -p $R /tmp/new
save() { tar -czf $OUT/call1.tgz -C /tmp c1; }
cp -r replayssm scripts tests docs pyproject.toml /tmp/new/
(cd /tmp/new && git apply $D/fold_pairs.patch) || { echo "patch failed"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
cd /tmp/new
timeout 320 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py \
  tests/ops/test_fold_pairs_ptx.py > $R/gpu_tests.log 2>&1
echo "gpu tests rc=$?"; tail -4 $R/gpu_tests.log; save
timeout 140 env REPLAYSSM_SOAK_STEPS=3000 REPLAYSSM_SOAK_LOG=$R/soak.jsonl \
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_soak.py > $R/soak.log 2>&1
echo "soak rc=$?"; tail -3 $R/soak.log; save
timeout 90 python3 -m replayssm demo > $R/demo.log 2>&1; echo "demo rc=$?"; tail -12 $R/demo.log; save
