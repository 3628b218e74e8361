# One device call, alternating processes: the landed tree (m) and a timing model of raw 16-bit ring keys (r:
# .probe_raw, run5_raw_keys.patch: the staging kernel and a folding program copy half the key bytes into half the
# shared memory and convert + scale each key element; wrong values, timing only). warps_probe.py, default launch,
# with the frozen flush / non-flush steps at T=4, B=256.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r5; rm -rf $R; mkdir -p $R
export CONFIGS='[[4,4,128]]' FLUSH=1 POINTS='[[1,32,256],[1,16,256],[4,16,256],[4,32,256],[4,16,128]]'
for rep in a b; do
  timeout 200 env OUT=$R python3 $D/warps_probe.py > $R/m_$rep.log 2>&1
  (cd .probe_raw && timeout 200 env OUT=$R TREE=$PWD python3 $D/warps_probe.py > $R/r_$rep.log 2>&1)
done
for f in m_a r_a m_b r_b; do echo "== $f"; grep -v "^{" $R/$f.log | grep -v "^T L B" | grep -v "^$" | tail -6; done
tar -czf $OUT/run5.tgz -C /tmp r5
