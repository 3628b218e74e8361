# The next session's device calls (prepared 2026-12-04 without a device): the 4-K-lane fold (fold_pairs.patch)
# against HEAD, in two calls (each under the 10-minute limit):
#   bash run1.sh tests   the GPU suite on the patched tree (its chains compare committed states torch.equal with the
#                        baseline), about 4 minutes
#   bash run1.sh ab      HEAD / patched / HEAD / patched at five points, traces compared torch.equal, about 8 minutes
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04e-cpu
P=$PWD/bench/results/2026-12-04-h200
R=/tmp/r1; rm -rf $R /tmp/new; mkdir -p $R /tmp/new
cp -r replayssm scripts tests docs pyproject.toml /tmp/new/
(cd /tmp/new && git apply $D/fold_pairs.patch) || { echo "patch failed"; exit 1; }
if [ "$1" = tests ]; then
(cd /tmp/new && timeout 500 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py \
  tests/ops/test_fold_pairs_ptx.py > $R/gpu_tests.log 2>&1); echo "gpu tests rc=$?"; tail -3 $R/gpu_tests.log
tar -czf $OUT/run1_tests.tgz -C /tmp r1; exit 0
fi
export POINTS='[[4,16,256],[4,16,128],[1,16,256],[1,32,256],[2,16,256]]'  # as 2026-12-04d run 2: 4 x < 130 s
for rep in a b; do
  timeout 130 env OUT=$R TAG=base TREE=$PWD python3 $P/ab_probe.py > $R/base_$rep.log 2>&1
  (cd /tmp/new && timeout 130 env OUT=$R TAG=new TREE=/tmp/new python3 $P/ab_probe.py > $R/new_$rep.log 2>&1)
done
OUT=$R python3 $P/ab_probe.py --compare base new; echo "compare rc=$?"
python3 $D/ab_table.py $R base new
rm -f $R/*.pt
tar -czf $OUT/run1_ab.tgz -C /tmp r1
