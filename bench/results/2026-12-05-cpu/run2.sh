# Optional device call (prepared 2026-12-05 without a device; run after ../2026-12-04e-cpu/run1.sh): a timing probe
# of the lazy decay on top of the 4-K-lane fold, to decide whether a (H, c) state format is worth building.
# Trees: "pairs" = HEAD + ../2026-12-04e-cpu/fold_pairs.patch; "lazy" = pairs + lazy_on_pairs.patch (NOT bitwise: the
# probe's fold keeps h = c * H with one scalar c per row block, renormalised below 1e-20). Alternated
# pairs / lazy / pairs / lazy at T=4 L=16 B=256 (random, non-flush, flush, fold per record) and T=1 L=16 B=256;
# then the probe's traces against pairs' (relative error: the probe must compute real values, bench/NOTES.md,
# eighteenth session, on timing models that fold garbage). About 5 minutes.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=$PWD/bench/results/2026-12-05-cpu
P=$PWD/bench/results/2026-12-04-h200
R=/tmp/r2; rm -rf $R /tmp/pairs /tmp/lazy; mkdir -p $R /tmp/pairs
cp -r replayssm scripts tests docs pyproject.toml /tmp/pairs/
(cd /tmp/pairs && git apply $D/../2026-12-04e-cpu/fold_pairs.patch) || { echo "pairs patch failed"; exit 1; }
cp -r /tmp/pairs /tmp/lazy
(cd /tmp/lazy && git apply $D/lazy_on_pairs.patch) || { echo "lazy patch failed"; exit 1; }
export POINTS='[[4,16,256],[1,16,256]]'
for rep in a b; do
  for tag in pairs lazy; do
    (cd /tmp/$tag && timeout 130 env OUT=$R TAG=$tag TREE=/tmp/$tag python3 $P/ab_probe.py > $R/${tag}_$rep.log 2>&1)
  done
done
python3 $D/rel_err.py $R pairs lazy
python3 $D/../2026-12-04e-cpu/ab_table.py $R pairs lazy
rm -f $R/*.pt
tar -czf $OUT/run2_lazy.tgz -C /tmp r2
