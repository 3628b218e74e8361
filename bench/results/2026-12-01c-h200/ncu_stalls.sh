cd .dev/v2 && export PYTHONPATH=$PWD
NCU=/usr/local/cuda/bin/ncu
M=smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for m in flush nonflush; do
  timeout 150 $NCU --kernel-name regex:_gdn_replay_verify_kernel --launch-skip 40 --launch-count 1 --metrics $M --section SourceCounters -o $OUT/rep_$m python fold_probe.py $m > $OUT/ncu_$m.txt 2>&1
  $NCU --import $OUT/rep_$m.ncu-rep --page details --metrics $M 2>&1 | grep -E "stalled|duration|throughput|pipe_fma|issue_active" > $OUT/stall_$m.txt
  cat $OUT/stall_$m.txt
  $NCU --import $OUT/rep_$m.ncu-rep --page source --csv --print-source sass > $OUT/src_$m.csv 2>&1
  ls -la $OUT/src_$m.csv; head -c 600 $OUT/src_$m.csv; echo
  rm -f $OUT/rep_$m.ncu-rep
done
