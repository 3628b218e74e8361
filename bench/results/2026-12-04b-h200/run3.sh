# One device call: the staging kernel reading its history keys in two passes through half the shared memory
# (REPLAYSSM_PREP_KEY_PASSES=2; the working tree) against one pass (=1), alternated (ab_probe.py of 2026-12-04-h200:
# 12-step traces compared torch.equal, then the timed random steps); then per-kernel times (kprof.py) of both.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r3; rm -rf $R; mkdir -p $R
export POINTS='[[1,32,256],[1,32,128],[4,32,256],[4,32,128],[2,32,256],[1,16,256]]'
for v in 1 2 1 2; do
  timeout 110 env OUT=$R TAG=p$v REPLAYSSM_PREP_KEY_PASSES=$v python3 $D/ab_probe.py > $R/p${v}_$RANDOM.log 2>&1
done
OUT=$R python3 $D/ab_probe.py --compare p1 p2; echo "compare rc=$?"
python3 - $R <<'PY'
import glob, json, sys
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(sys.argv[1] + "/p*.log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    cells = []
    for tag in ("p1", "p2"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        cells.append(tag + " " + " / ".join(f"{r['random_us']:.1f}" for r in rs))
    print(f"T={T} L={L:>2} B={B:>3} | " + " | ".join(cells))
PY
rm -f $R/*.pt
export POINTS='[[1,32,256,64],[4,32,256,64],[4,32,128,64]]'
for v in 1 2; do echo "== passes $v"
  timeout 60 env OUT=$R REPLAYSSM_PREP_KEY_PASSES=$v python3 $D/kprof.py 2>&1 | grep '^T='
  mv $R/kprof.json $R/kprof_p$v.json
done
tar -czf $OUT/run3.tgz -C /tmp r3
