# The first device call of the next session (prepared 2026-12-05, twenty-fifth session, without a device). Before it,
# on the CPU machine: `rm -rf .base && mkdir .base && git archive 9ded8bd replayssm | tar -x -C .base` (the package
# as the twenty-fourth session left it, before the gates' fix) and pass `carry: [".base"]` to the run.
# The folding rows' window products taken with the fold (verify_dots, REPLAYSSM_VERIFY_DIF) against the stream of the
# folded checkpoint (DIF=0, the default) and against the previous package (prev: .base, without the packed fold's
# gates fix): base / m1 / m2 / m3 / prev / base / m1 / m2 / m3 at three points (../2026-12-04-h200/ab_probe.py:
# 12-step traces, the random step, and at T=4 B=256 the pure non-flush and flush steps and the fold per record).
# Traces of m1-m3 and prev must be torch.equal to base's. About 5 minutes.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P=$PWD/bench/results/2026-12-04-h200
R=/tmp/c1; rm -rf $R; mkdir -p $R
export POINTS='[[4,16,256],[4,16,128],[4,32,256]]'
arm() {  # tag, rep, tree, DIF
  timeout 70 env OUT=$R TAG=$1 TREE=$3 REPLAYSSM_VERIFY_DIF=$4 python3 $P/ab_probe.py > $R/$1_$2.log 2>&1
  echo "$1 $2 rc=$?"
}
for d in 0 1 2 3; do t=m$d; [ $d = 0 ] && t=base; arm $t a $PWD $d; done
[ -d .base/replayssm ] && arm prev a $PWD/.base 0
for d in 0 1 2 3; do t=m$d; [ $d = 0 ] && t=base; arm $t b $PWD $d; done
for t in m1 m2 m3 prev; do OUT=$R python3 $P/ab_probe.py --compare base $t; echo "compare $t rc=$?"; done
python3 bench/results/2026-12-04e-cpu/ab_table.py $R base m1 m2 m3 prev
rm -f $R/*.pt; tar -czf $OUT/call1.tgz -C /tmp c1
