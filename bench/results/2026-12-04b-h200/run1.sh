# One device call: the staging kernel prefetches the main kernel's first wave of checkpoints into L2
# (REPLAYSSM_VERIFY_L2PF=1 plain, =2 evict-last; the working tree), A/B against it off in the same tree
# (ab_probe.py of 2026-12-04-h200: 12-step traces compared torch.equal, then the timed random steps).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r1; rm -rf $R; mkdir -p $R
export POINTS='[[1,32,256],[1,16,256],[4,16,128],[4,16,256],[2,16,256],[1,32,128]]'
for v in 0 1 2 0 2 1; do
  timeout 100 env OUT=$R TAG=pf$v REPLAYSSM_VERIFY_L2PF=$v python3 $D/ab_probe.py > $R/pf${v}_$RANDOM.log 2>&1
done
for v in 1 2; do OUT=$R python3 $D/ab_probe.py --compare pf0 pf$v; echo "compare pf$v rc=$?"; done
python3 - $R <<'PY'
import glob, json, sys
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(sys.argv[1] + "/pf*.log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    cells = []
    for tag in ("pf0", "pf1", "pf2"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        cells.append(tag + " " + " / ".join(f"{r['random_us']:.1f}" + (f" nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f}" if "flush_us" in r else "") for r in rs))
    print(f"T={T} L={L:>2} B={B:>3} | " + " | ".join(cells))
PY
rm -f $R/*.pt
tar -czf $OUT/run1.tgz -C /tmp r1
