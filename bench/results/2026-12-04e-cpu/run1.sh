# The next session's device call (prepared 2026-12-04 without a device): the 4-K-lane fold (fold_pairs.patch)
# against HEAD. 1. the GPU suite on the patched tree (its chains compare committed states torch.equal with the
# baseline); 2. an A/B, HEAD / patched / HEAD / patched, with traces compared torch.equal. About 6 minutes.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04e-cpu
P=$PWD/bench/results/2026-12-04-h200
R=/tmp/r1; rm -rf $R /tmp/new; mkdir -p $R /tmp/new
cp -r replayssm scripts tests docs pyproject.toml /tmp/new/
(cd /tmp/new && git apply $D/fold_pairs.patch) || { echo "patch failed"; exit 1; }
(cd /tmp/new && timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu --deselect tests/gpu/test_soak.py \
  tests/ops/test_fold_pairs_ptx.py > $R/gpu_tests.log 2>&1); echo "gpu tests rc=$?"; tail -3 $R/gpu_tests.log
export POINTS='[[4,16,256],[4,16,128],[4,16,8],[1,16,256],[1,32,256],[2,16,256],[4,32,256]]'
for rep in a b; do
  timeout 150 env OUT=$R TAG=base TREE=$PWD python3 $P/ab_probe.py > $R/base_$rep.log 2>&1
  (cd /tmp/new && timeout 150 env OUT=$R TAG=new TREE=/tmp/new python3 $P/ab_probe.py > $R/new_$rep.log 2>&1)
done
OUT=$R python3 $P/ab_probe.py --compare base new; echo "compare rc=$?"
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
tar -czf $OUT/run1.tgz -C /tmp r1
