# One device call: the step-grouped fold probe (.grp = HEAD's package with grouped_fold.patch, carried, not committed)
# against the landed eager fold, in one tree by environment: A = GRP_OFF=1 (the landed code), B = groups of two with a
# stand-in Gram (timing only), C = groups of two with the Gram computed in the kernel (right values). Alternated A B C
# A B C, T=4 L=16 B=256 (ab_probe.py of 2026-12-04-h200: random, frozen non-flush and flush steps, fold per record);
# then the distance of B's and C's 12-step traces from A's (not bitwise by design).
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-04-h200
R=/tmp/r1; rm -rf $R; mkdir -p $R
export POINTS='[[4,16,256]]'
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
for rep in a b; do
  for arm in "A 1 2 2" "B 0 2 2" "C 0 2 1"; do
    set -- $arm
    (cd .grp && timeout 100 env OUT=$R TAG=$1 TREE=$PWD GRP_OFF=$2 GRP_G=$3 GRP_GRAM=$4 GRP_RPT=4 python3 $D/ab_probe.py > $R/$1_$rep.log 2>&1)
    tail -1 $R/$1_$rep.log
  done
done
python3 - $R <<'PY'
import glob, json, sys, torch
R = sys.argv[1]
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(R + "/*_[ab].log")) for l in open(f) if l.startswith("{")]
for tag in "ABC":
    rs = [r for r in rows if r["tag"] == tag]
    print(tag, " | ".join(f"random {r['random_us']:.1f} nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f} fold {r['fold_us_per_record']:.2f}" for r in rs))
oa, ca = torch.load(f"{R}/trace_A_4_16_256.pt")
rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm())
for tag in "BC":
    o, c = torch.load(f"{R}/trace_{tag}_4_16_256.pt")
    print(f"{tag} vs A: states {rel(c, ca):.2e} outputs {rel(o, oa):.2e} finite {bool(torch.isfinite(c).all())}")
PY
rm -f $R/*.pt
tar -czf $OUT/run1.tgz -C /tmp r1
