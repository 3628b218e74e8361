# Device call for the fold last (REPLAYSSM_VERIFY_FOLD_LAST=1; prepared in the thirty-second session, not yet run: no
# device was lent after run 1): a flushing row streams its unfolded checkpoint with its history, as a non-flush row
# does, and folds last. Arms, one tree (the working tree): A = the default (DIF mode 2 at L <= 16), A0 = DIF=0 (the
# stream after the fold: FOLD_LAST turns the DIF modes off), F = FOLD_LAST=1. A once, then A0 F A0 F; random, frozen
# non-flush and flush steps and the fold per record at every point (ab_all.py); then F's traces against A0's
# (committed states torch.equal expected, outputs within bf16 rounding). About 4 minutes on an H200.
#   REPLAYSSM_COMMIT=<hash> bash bench/results/2026-12-05j-h200/run2.sh
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P=$PWD/bench/results/2026-12-05j-h200/ab_all.py
R=/tmp/r2; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv
export POINTS='[[4,16,256],[4,16,128],[1,32,256],[2,16,256],[4,32,256]]'
timeout 150 env OUT=$R TAG=A python3 $P > $R/A_a.log 2>&1; tail -1 $R/A_a.log
for rep in a b; do
  timeout 150 env OUT=$R TAG=A0 REPLAYSSM_VERIFY_DIF=0 python3 $P > $R/A0_$rep.log 2>&1; tail -1 $R/A0_$rep.log
  timeout 150 env OUT=$R TAG=F REPLAYSSM_VERIFY_FOLD_LAST=1 python3 $P > $R/F_$rep.log 2>&1; tail -1 $R/F_$rep.log
done
python3 - $R <<'PY'
import glob, json, sys, torch
R = sys.argv[1]
rows = [json.loads(l.split(" t=")[0]) for f in sorted(glob.glob(R + "/*_[ab].log")) for l in open(f) if l.startswith("{")]
for T, L, B in sorted({(r["T"], r["L"], r["B"]) for r in rows}):
    print(f"T={T} L={L} B={B}")
    for tag in ("A", "A0", "F"):
        rs = [r for r in rows if (r["T"], r["L"], r["B"], r["tag"]) == (T, L, B, tag)]
        print(f"  {tag:2}", " | ".join(f"random {r['random_us']:.1f} nf {r['nonflush_us']:.1f} fl {r['flush_us']:.1f} fold {r['fold_us_per_record']:.2f}" for r in rs))
    rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm())
    oa, ca = torch.load(f"{R}/trace_A0_{T}_{L}_{B}.pt")
    o, c = torch.load(f"{R}/trace_F_{T}_{L}_{B}.pt")
    print(f"  F vs A0: committed states torch.equal {torch.equal(c, ca)}, outputs rel {rel(o, oa):.2e}")
PY
rm -f $R/*.pt
tar -czf $OUT/run2.tgz -C /tmp r2
