# One device call: the staging kernel with fewer instructions (the working tree: gates computed once, an element per
# lane, then moved to the two layouts; history keys copied in ring order with constant addresses and the dots
# gathered back to record order) against the package before it (.base = 3e44da1's, carried): traces of 6 points
# compared torch.equal, base, new, base, new (ab_probe.py of 2026-12-04-h200); per-kernel times (kprof.py) of both;
# then the GPU suite but the soak on the new tree.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r6; rm -rf $R; mkdir -p $R
export POINTS='[[1,32,256],[1,16,256],[4,16,128],[4,16,256],[2,16,256],[8,16,256]]'
for rep in a b; do
  (cd .base && timeout 100 env OUT=$R TAG=base TREE=$PWD python3 $D/ab_probe.py > $R/base_$rep.log 2>&1)
  timeout 100 env OUT=$R TAG=new python3 $D/ab_probe.py > $R/new_$rep.log 2>&1
done
OUT=$R python3 $D/ab_probe.py --compare base new; echo "compare rc=$?"
python3 - $R <<'PY'
import glob, json, sys
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(sys.argv[1] + "/*_[ab].log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    cells = []
    for tag in ("base", "new"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        cells.append(tag + " " + " / ".join(f"{r['random_us']:.1f}" + (f" nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f}" if "flush_us" in r else "") for r in rs))
    print(f"T={T} L={L:>2} B={B:>3} | " + " | ".join(cells))
PY
rm -f $R/*.pt
export POINTS='[[1,32,256,64],[1,16,256,64],[4,16,128,64],[4,16,256,64]]'
(cd .base && timeout 60 env OUT=$R TREE=$PWD python3 $D/kprof.py 2>&1 | grep '^T=' | sed 's/^/base /'; mv $R/kprof.json $R/kprof_base.json)
timeout 60 env OUT=$R python3 $D/kprof.py 2>&1 | grep '^T=' | sed 's/^/new  /'; mv $R/kprof.json $R/kprof_new.json
tar -czf $OUT/run6.tgz -C /tmp r6
timeout 250 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
tar -czf $OUT/run6.tgz -C /tmp r6
