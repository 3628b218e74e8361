# One device call: ncu warp-state statistics and instruction counts of the pure-flush verify kernel (T=4, L=16,
# B=256, one layer; ../2026-12-01c-h200/fold_probe.py) with the probe of run 9 (run9_postfold_probe.patch applied,
# uncommitted) in mode 0 (the whole kernel) and mode 1 (a folding program stops after its fold), clocks left alone.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
NCU=/usr/local/cuda/bin/ncu
P=$PWD/bench/results/2026-12-01c-h200/fold_probe.py
R=/tmp/r11; mkdir -p $R
save() { tar -czf $OUT/run11.tgz -C /tmp r11; }
M=smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
for m in 0 1; do
  REPLAYSSM_PROBE=$m timeout 150 $NCU --clock-control none --kernel-name regex:_gdn_replay_verify_kernel --launch-skip 40 --launch-count 1 --metrics $M -o $R/rep_$m python3 $P flush > $R/ncu_p$m.txt 2>&1
  $NCU --import $R/rep_$m.ncu-rep --page details --metrics $M > $R/details_p$m.txt 2>&1
  echo "== p$m"; grep -E "stalled|duration|throughput|pipe_|tensor|issue_active|warps_active|inst_executed.sum|conflicts" $R/details_p$m.txt | awk '{print $1, $NF}'
  rm -f $R/rep_$m.ncu-rep
  save
done
