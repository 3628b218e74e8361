# One device call: the lazy decay inside the verify's fold only (a probe with right values, not bitwise: h = c * H
# with a scalar c per block, no `h *= e` per record, h = c * H written back; .lazy = HEAD's package with
# run4_lazy_fold.patch, carried) against the landed fold (the working tree), alternated b, l, b, l
# (ab_probe.py of 2026-12-04-h200); then how far the lazy traces are from the landed ones (not bitwise by design).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r4; rm -rf $R; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[1,16,256],[1,32,256],[4,32,256],[8,16,256]]'
for rep in a b; do
  timeout 110 env OUT=$R TAG=base python3 $D/ab_probe.py > $R/base_$rep.log 2>&1
  (cd .lazy && timeout 110 env OUT=$R TAG=lazy TREE=$PWD python3 $D/ab_probe.py > $R/lazy_$rep.log 2>&1)
done
python3 - $R <<'PY'
import glob, json, os, sys, torch
R = sys.argv[1]
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(R + "/*_[ab].log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    cells = []
    for tag in ("base", "lazy"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        cells.append(tag + " " + " / ".join(f"{r['random_us']:.1f}" + (f" nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f} fold {r['fold_us_per_record']:.1f}" if "flush_us" in r else "") for r in rs))
    (oa, ca), (ob, cb) = (torch.load(f"{R}/trace_{t}_{T}_{L}_{B}.pt") for t in ("base", "lazy"))
    rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm())
    print(f"T={T} L={L:>2} B={B:>3} | " + " | ".join(cells) + f" | rel diff states {rel(cb, ca):.2e} outputs {rel(ob, oa):.2e} finite {bool(torch.isfinite(cb).all())}")
PY
rm -f $R/*.pt
tar -czf $OUT/run4.tgz -C /tmp r4
