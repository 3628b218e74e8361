# One device call: run 6's A/B again (its probe failed on a missing argument check): raw 16-bit ring keys (the
# working tree) against the package before them (.base, carried): 12-step traces compared torch.equal, the two trees
# alternated (b, n, b, n; ab_probe.py); then the official kernel benches of the new tree (carry .peers): T=4 and
# plain decode, both SGLang releases.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r7; rm -rf $R; mkdir -p $R
export POINTS='[[1,32,256],[1,16,256],[4,16,256],[4,32,256],[4,16,128],[4,16,8],[2,16,256],[8,16,256],[1,16,8]]'
for rep in a b; do
  (cd .base && timeout 100 env OUT=$R TAG=base TREE=$PWD python3 $D/ab_probe.py > $R/base_$rep.log 2>&1)
  timeout 100 env OUT=$R TAG=new python3 $D/ab_probe.py > $R/new_$rep.log 2>&1
done
OUT=$R python3 $D/ab_probe.py --compare base new > $R/compare.log 2>&1; echo "compare rc=$?"; cat $R/compare.log
python3 - $R <<'PY'
import glob, json, sys
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(sys.argv[1] + "/*_[ab].log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    cells = []
    for tag in ("base", "new"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        cells.append(" / ".join(f"{r['random_us']:.1f}" + (f" nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f} fold {r['fold_us_per_record']:.1f}" if "flush_us" in r else "") for r in rs))
    print(f"T={T} L={L:>2} B={B:>3} | base {cells[0]} | new {cells[1]}")
PY
rm -f $R/*.pt
tar -czf $OUT/run7.tgz -C /tmp r7
timeout 110 python3 -m replayssm bench kernels --windows 4 --rings 16 --batches 8 64 128 256 --target-ms 15 --max-seconds 90 --tag kernels_T4 --out $R > $R/kernels_T4.log 2>&1; tail -12 $R/kernels_T4.log | cut -c1-220
tar -czf $OUT/run7.tgz -C /tmp r7
timeout 130 python3 -m replayssm bench kernels --windows 1 --rings 16 32 --batches 128 256 --target-ms 15 --max-seconds 110 --tag kernels_T1 --out $R > $R/kernels_T1.log 2>&1; tail -8 $R/kernels_T1.log | cut -c1-220
tar -czf $OUT/run7.tgz -C /tmp r7
