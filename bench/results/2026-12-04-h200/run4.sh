# One device call, alternating processes: the landed tree (m), a staging kernel that reads half the history-key bytes
# into half the shared memory (h: .probe_half, run4_half_keys.patch, timing only: its history dots are wrong), and
# the landed tree with a programmatic dependent launch of the main kernel after the staging kernel (p:
# REPLAYSSM_VERIFY_PDL=1, which forces it at every batch). warps_probe.py with the default launch only, no flush.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r4; rm -rf $R; mkdir -p $R
export CONFIGS='[[4,4,128]]' FLUSH=0 POINTS='[[1,32,256],[1,16,256],[1,32,128],[4,16,256],[4,16,128],[4,32,256]]'
for rep in a b; do
  timeout 150 env OUT=$R python3 $D/warps_probe.py > $R/m_$rep.log 2>&1
  (cd .probe_half && timeout 150 env OUT=$R TREE=$PWD python3 $D/warps_probe.py > $R/h_$rep.log 2>&1)
  timeout 150 env OUT=$R REPLAYSSM_VERIFY_PDL=1 python3 $D/warps_probe.py > $R/p_$rep.log 2>&1
done
for f in m_a h_a p_a m_b h_b p_b; do echo "== $f"; grep -v "^{" $R/$f.log | grep -v "^T L B" | grep -v "^$" | tail -8; done
tar -czf $OUT/run4.tgz -C /tmp r4
