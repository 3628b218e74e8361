# One device call: ncu of the staging kernel (verify_prep) at T=1 L=32 B=256 and T=4 L=16 B=128 (stage_probe.py,
# the landed tree, clocks left alone): stall reasons per issue and source-level warp-state samples per SASS line.
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
NCU=/usr/local/cuda/bin/ncu
P=$PWD/bench/results/2026-12-04b-h200/stage_probe.py
R=/tmp/r5; rm -rf $R; mkdir -p $R
M=smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,launch__occupancy_limit_warps,launch__occupancy_limit_blocks
for pt in "1 32 256" "4 16 128"; do set -- $pt; v=T$1_L$2_B$3
  timeout 200 $NCU --clock-control none --kernel-name regex:_window_prep --launch-skip 40 --launch-count 1 --metrics $M --section SourceCounters -o $R/rep_$v python3 $P $1 $2 $3 > $R/ncu_$v.txt 2>&1
  $NCU --import $R/rep_$v.ncu-rep --page details --metrics $M > $R/details_$v.txt 2>&1
  echo "== $v"; grep -E "stalled|duration|throughput|issue_active|warps_active|inst_executed|occupancy" $R/details_$v.txt
  $NCU --import $R/rep_$v.ncu-rep --page source --csv --print-source sass > $R/src_$v.csv 2>&1
  rm -f $R/rep_$v.ncu-rep
done
ls -la $R; tail -3 $R/ncu_*.txt
tar -czf $OUT/run5.tgz -C /tmp r5
