# The thirty-third session's A/B of the skewed fold (verify_fold._fold_skewed: a fold block held as two half tiles
# whose updates run half a record apart, so one half's butterfly has the other half's work beside it) against HEAD's
# fold (.base = 92ac13c's package, carried, not committed). One call: B S B S B S with ab_all.py (2026-12-05j) at six
# points (random, frozen non-flush and pure-flush steps, fold per record), then S's 12-step traces against B's
# (outputs and committed states torch.equal expected: the same operations per row), then the GPU suite on S.
#   REPLAYSSM_COMMIT=<hash> bash bench/results/2026-12-05m-h100/run1.sh      (carry [".base", ".peers", ".whl"])
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P=$PWD/bench/results/2026-12-05j-h200/ab_all.py
R=/tmp/m1; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee $R/gpu.txt
export POINTS='[[4,16,256],[4,16,128],[4,32,256],[2,16,256],[1,32,256],[8,16,256]]'
for rep in a b c; do
  timeout 120 env OUT=$R TAG=B TREE=$PWD/.base python3 $P > $R/B_$rep.log 2>&1; tail -1 $R/B_$rep.log | cut -c1-150
  timeout 120 env OUT=$R TAG=S TREE=$PWD python3 $P > $R/S_$rep.log 2>&1; tail -1 $R/S_$rep.log | cut -c1-150
done
python3 - $R <<'PY' | tee $R/summary.txt
import glob, json, sys, torch
R = sys.argv[1]
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(R + "/*_[abc].log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    print(f"T={T} L={L} B={B}")
    for tag in ("B", "S"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        print(f"  {tag}", " | ".join(f"rnd {r['random_us']:.1f} nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f} fold {r['fold_us_per_record']:.2f}" for r in rs))
    ob, cb = torch.load(f"{R}/trace_B_{T}_{L}_{B}.pt")
    o, c = torch.load(f"{R}/trace_S_{T}_{L}_{B}.pt")
    print(f"  S vs B: outputs torch.equal {torch.equal(o, ob)}, committed states torch.equal {torch.equal(c, cb)}")
PY
rm -f $R/*.pt
tar -czf $OUT/m1.tgz -C /tmp m1
pip install -q --no-index --no-deps .whl/*.whl > /dev/null 2>&1
python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu tests/gpu --deselect tests/gpu/test_soak.py -rfEs \
  > $OUT/gpu_tests.log 2>&1; tail -2 $OUT/gpu_tests.log
