# The first device call of the next session (prepared 2026-12-05, twenty-fifth session, without a device): the
# folding rows' window products taken with the fold (verify_dots, REPLAYSSM_VERIFY_DIF) against the stream of the
# folded checkpoint (DIF=0, the default, HEAD's SASS): base / m1 / m2 / m3 twice at three points
# (../2026-12-04-h200/ab_probe.py: 12-step traces torch.equal, the random step, and at T=4 B=256 the pure non-flush
# and flush steps and the fold cost per record), then the GPU suite but the soak (it forces each mode in
# tests/gpu/test_staged_retry.py). About 8 minutes.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P=$PWD/bench/results/2026-12-04-h200
R=/tmp/c1; rm -rf $R; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[4,32,256]]'
for rep in a b; do
  for d in 0 1 2 3; do
    t=m$d; [ $d = 0 ] && t=base
    timeout 75 env OUT=$R TAG=$t TREE=$PWD REPLAYSSM_VERIFY_DIF=$d python3 $P/ab_probe.py > $R/${t}_$rep.log 2>&1
    echo "$t $rep rc=$?"
  done
done
for t in m1 m2 m3; do OUT=$R python3 $P/ab_probe.py --compare base $t; echo "compare $t rc=$?"; done
python3 bench/results/2026-12-04e-cpu/ab_table.py $R base m1 m2 m3
rm -f $R/*.pt; tar -czf $OUT/call1.tgz -C /tmp c1
timeout 250 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1
echo "gpu tests rc=$?"; tail -4 $R/gpu_tests.log
tar -czf $OUT/call1.tgz -C /tmp c1
