#!/usr/bin/env bash
# session 8, call 4: why the persistent-capable kernel is slower in grid mode: ncu warp-state / instruction stats, base vs new grid vs new persistent, at 64Kx512
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200
T0=$(date +%s); L=$OUT/c4; mkdir -p $L
K=$PWD/..
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.txt 2>&1; echo "pip rc=$?"
for c in base grid pers; do
  case $c in base) export PA_BENCH_KERNELS=$K/k_main PA_BENCH_PERSISTENT=0;; grid) unset PA_BENCH_KERNELS; export PA_BENCH_PERSISTENT=0;; pers) unset PA_BENCH_KERNELS PA_BENCH_PERSISTENT;; esac
  timeout -k 5 90 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats --section LaunchStats --metrics smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active -k regex:pa_v3$ -s 1 -c 1 --csv --page details python3 scripts/profile_target.py --variant v3 --shape 64Kx512 --launches 2 > $L/ncu_$c.csv 2> $L/ncu_$c.err
  echo "$c rc=$? at $(( $(date +%s) - T0 ))s"
  python3 - $L/ncu_$c.csv <<'PY'
import csv,sys
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>10]
if not rows: print(open(sys.argv[1]).read()[-2000:]); sys.exit()
h=rows[0]; mi=h.index("Metric Name"); vi=h.index("Metric Value"); ui=h.index("Metric Unit")
want=("Duration","Executed Instructions","Issue Slots Busy","Stall No Instruction","No Eligible","Warp Cycles Per Issued Instruction","Avg. Active Threads Per Warp","Branch Instructions","Registers Per Thread","Grid Size","Issued Warp Per Scheduler","One or More Eligible","stalled","inst_executed")
for r in rows[1:]:
    if any(w in r[mi] for w in want): print("  ", r[mi], r[vi], r[ui])
PY
done
unset PA_BENCH_KERNELS PA_BENCH_PERSISTENT
tar czf $OUT/c4.tgz -C $OUT c4 && rm -rf $L
echo "done at $(( $(date +%s) - T0 ))s"
