# One device call (lean: the device budget is short). Mode 0 of run9_postfold_probe.patch (the kernel as on main)
# saves its 12-step trace (p0). Prefetch (pf; run9_prefetch.patch on 2ddad2d, its files in run9_pf/): staged launches
# copy the window's values and staged matrices (GA, GB) by cp.async in a group of their own before the fold, instead
# of after it (values) and by blocking loads (matrices); same arithmetic, so outputs and committed states must equal
# p0's. Bisect of a folding program's post-fold time (probe modes, wrong outputs by design, GATE_BYPASS=1): 1 stop
# after the fold; 2 no re-stream of the folded tile (chunk copies masked: zero-fill); 4 no window terms (one launch:
# _window_terms; staged: the GA/GB loads). Fold last (fl; run9_fold_last.patch, its files in run9_fl/): a flushing
# row's window from the unfolded checkpoint and its history, the fold after it (committed states must equal p0's;
# outputs differ in rounding). T=1 (one launch) and T=4 (staged), L=16, B=256. Then the kernels' GPU tests on pf.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P0=bench/results/2026-12-03-h200
R=/tmp/r9; mkdir -p $R
save() { tar -czf $OUT/run9.tgz -C /tmp r9; }
export POINTS='[[1,16,256],[4,16,256]]'
D=bench/results/2026-12-03f-h200
for t in pf fl; do rm -rf /tmp/${t}tree && mkdir /tmp/${t}tree && cp -r replayssm tests pyproject.toml /tmp/${t}tree/ && cp $D/run9_$t/*.py /tmp/${t}tree/replayssm/ops/; done
timeout 60 env OUT=$R python3 $P0/ff_probe.py p0 --save /tmp/base.pt > $R/ab_p0.log 2>&1; grep "^p0:" $R/ab_p0.log
timeout 60 env TREE=/tmp/pftree OUT=$R python3 $P0/ff_probe.py pf --compare /tmp/base.pt > $R/ab_pf.log 2>&1; grep "^pf:\|replayssm from" $R/ab_pf.log
save
for m in "1 p1" "2 p2" "4 p4"; do set -- $m
  timeout 60 env REPLAYSSM_PROBE=$1 GATE_BYPASS=1 OUT=$R python3 $P0/ff_probe.py $2 > $R/ab_$2.log 2>&1; grep "^$2:" $R/ab_$2.log
done
timeout 60 env TREE=/tmp/fltree OUT=$R python3 $P0/ff_probe.py fl --compare /tmp/base.pt > $R/ab_fl.log 2>&1; grep "^fl:\|replayssm from" $R/ab_fl.log
save
(cd /tmp/pftree && python3 -c "import replayssm; print(replayssm.__file__)" && timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_real_shape.py) > $R/pf_gpu_tests.log 2>&1; tail -2 $R/pf_gpu_tests.log
save
