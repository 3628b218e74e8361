# One device call on the landed code (64fb1cb's kernels): a sweep of verify.FOLD_FREE_WAVES (1.5 landed, never
# swept) at the staged points, 1.5 first and last; outputs and committed states of a 12-step trace compared with 1.5's.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D=bench/results/2026-12-03c-h200
R=/tmp/r2; mkdir -p $R
save() { tar -czf $OUT/run2.tgz -C /tmp r2; }
export POINTS='[[4,16,128],[4,16,256],[4,16,64],[2,16,256],[8,16,256]]'
timeout 70 env FFW=1.5 OUT=$R python3 $D/ffw_probe.py w15 --save /tmp/base.pt > $R/ab_w15.log 2>&1; grep "^w15:" $R/ab_w15.log
save
for w in 1 2.5 0.5 1.5; do
  t=w${w/./}b; [ $w != 1.5 ] && t=w${w/./}
  timeout 60 env FFW=$w OUT=$R python3 $D/ffw_probe.py $t --compare /tmp/base.pt > $R/ab_$t.log 2>&1; grep "^$t:" $R/ab_$t.log
  save
done
