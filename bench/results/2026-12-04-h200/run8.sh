# One device call: the staged verify's main kernel as a programmatic dependent launch of the staging kernel, which
# lets it launch at once (griddepcontrol.launch_dependents first; the main kernel waits, griddepcontrol.wait, before
# it reads anything): .probe_pdl (run8_staged_pdl.patch) with PROBE_STAGED_PDL=1 REPLAYSSM_VERIFY_PDL=1 (p) against
# the same tree without (m), alternated m, p, m, p (ab_probe.py); traces compared torch.equal.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r8; rm -rf $R; mkdir -p $R
export POINTS='[[1,32,256],[1,16,256],[1,32,128],[4,16,256],[4,16,128],[4,32,256],[2,16,256],[8,16,256]]'
cd .probe_pdl
for rep in a b; do
  timeout 100 env OUT=$R TAG=m TREE=$PWD python3 $D/ab_probe.py > $R/m_$rep.log 2>&1
  timeout 100 env OUT=$R TAG=p TREE=$PWD PROBE_STAGED_PDL=1 REPLAYSSM_VERIFY_PDL=1 python3 $D/ab_probe.py > $R/p_$rep.log 2>&1
done
OUT=$R TREE=$PWD python3 $D/ab_probe.py --compare m p > $R/compare.log 2>&1; echo "compare rc=$?"; cat $R/compare.log
python3 - $R <<'PY'
import glob, json, sys
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(sys.argv[1] + "/*_[ab].log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    cells = []
    for tag in ("m", "p"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        cells.append(" / ".join(f"{r['random_us']:.1f}" + (f" nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f}" if "flush_us" in r else "") for r in rs))
    print(f"T={T} L={L:>2} B={B:>3} | m {cells[0]} | p {cells[1]}")
PY
rm -f $R/*.pt
tar -czf $OUT/run8.tgz -C /tmp r8
