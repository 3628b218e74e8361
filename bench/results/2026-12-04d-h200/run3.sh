# One device call: the staged main kernel with a register cap of 168 (three programs per SM: 146 registers at T=4,
# 153 at T=1, no spills) against 128 (.base = 1cbd871, carried); base, new, base, new.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r3; rm -rf $R; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[1,16,256]]'
for rep in a b; do
  (cd .base && timeout 130 env OUT=$R TAG=base TREE=$PWD python3 $D/ab_probe.py > $R/base_$rep.log 2>&1)
  timeout 130 env OUT=$R TAG=new REPLAYSSM_VERIFY_MAXNREG=168 python3 $D/ab_probe.py > $R/new_$rep.log 2>&1
done
OUT=$R python3 $D/ab_probe.py --compare base new; echo "compare rc=$?"
python3 - $R <<'PY'
import glob, json, sys
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(sys.argv[1] + "/*_[ab].log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    cells = []
    for tag in ("base", "new"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        cells.append(tag + " " + " / ".join(f"{r['random_us']:.1f}" + (f" nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f} fold {r['fold_us_per_record']:.1f}" if "flush_us" in r else "") for r in rs))
    print(f"T={T} L={L:>2} B={B:>3} | " + " | ".join(cells))
PY
rm -f $R/*.pt
tail -3 $R/new_a.log
tar -czf $OUT/run3.tgz -C /tmp r2
