# One device call: ncu warp-state statistics of the pure-flush verify kernel (T=4, L=16, B=256, one layer; the probe
# of ../2026-12-01c-h200/fold_probe.py) with the fold in all-reduce form (this tree) and in reduce-scatter form
# (.rs_tree, carried: e481c05's package with run1_fold_rs.patch applied), clocks left alone.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
NCU=/usr/local/cuda/bin/ncu
P=$PWD/bench/results/2026-12-01c-h200/fold_probe.py
R=/tmp/r4; mkdir -p $R
save() { tar -czf $OUT/run4.tgz -C /tmp r4; }
M=smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second
for v in ar rs; do
  if [ $v = rs ]; then T=$PWD/.rs_tree; else T=$PWD; fi
  (cd $T && PYTHONPATH=$T timeout 200 $NCU --clock-control none --kernel-name regex:_gdn_replay_verify_kernel --launch-skip 40 --launch-count 1 --metrics $M --section SourceCounters -o $R/rep_$v python3 $P flush) > $R/ncu_$v.txt 2>&1
  $NCU --import $R/rep_$v.ncu-rep --page details --metrics $M > $R/details_$v.txt 2>&1
  grep -E "stalled|duration|throughput|pipe_fma|issue_active|warps_active|inst_executed|per_second" $R/details_$v.txt
  $NCU --import $R/rep_$v.ncu-rep --page source --csv --print-source sass > $R/src_$v.csv 2>&1
  rm -f $R/rep_$v.ncu-rep
  save
done
