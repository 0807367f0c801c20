#!/usr/bin/env bash
# Everything a kernel change must show on a GPU, in one go: the GPU tests, compute-sanitizer
# (memcheck, racecheck, synccheck; memcheck again on the forced Turing path), a run of the PR
# config, its comparison with a baseline run, and an Nsight Compute profile of v2.
#
#   scripts/gpu_check.sh LOG_DIR [BASELINE_RUN]
#
# Logs go to LOG_DIR; the run goes to results/ as usual. On a machine whose copy of the tree has
# no .git, or a stale one, export PA_BENCH_GIT_COMMIT=<commit> first so the run's meta names it. Each step's exit status is printed and
# the script carries on, so one failure does not hide the others.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOG=${1:?usage: scripts/gpu_check.sh LOG_DIR [BASELINE_RUN]}
BASE=${2:-}
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PB="python3 -m pa_bench"
t0=$(date +%s)
step() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

step "env";      $PB env > "$LOG/env.txt" 2>&1
step "pytest -m gpu"
python3 -m pytest -m gpu -q -p no:cacheprovider -rs > "$LOG/pytest_gpu.log" 2>&1; echo "rc=$?"; tail -1 "$LOG/pytest_gpu.log"
for tool in memcheck racecheck synccheck; do
    step "compute-sanitizer $tool"
    compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/launch_target.py --sweep > "$LOG/sanitizer_$tool.log" 2>&1
    echo "rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOG/sanitizer_$tool.log" | tail -1
done
step "compute-sanitizer memcheck --force-turing"
compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/launch_target.py --sweep --force-turing \
    > "$LOG/sanitizer_memcheck_turing.log" 2>&1; echo "rc=$?"; grep "ERROR SUMMARY" "$LOG/sanitizer_memcheck_turing.log"
step "run configs/pr2092.yaml"
COLUMNS=200 $PB run configs/pr2092.yaml --backend cuda > "$LOG/run_pr2092.txt" 2>&1; echo "rc=$?"
NEW=$(ls -d results/*-pr2092-cuda 2>/dev/null | sort | tail -1)
if [ -n "$BASE" ] && [ -n "$NEW" ]; then
    step "compare $BASE $NEW"
    COLUMNS=200 $PB compare "$BASE" "$NEW" > "$LOG/compare.txt" 2>&1; tail -3 "$LOG/compare.txt"
fi
step "ncu v2 32Kx1024"
ncu --clock-control none --set full -k 'regex:pa_v2$' -c 1 -o "$LOG/ncu_v2_32k" \
    python3 scripts/launch_target.py --variant v2 --shape 32Kx1024 > "$LOG/ncu.log" 2>&1; echo "rc=$?"
ncu --import "$LOG/ncu_v2_32k.ncu-rep" --page details > "$LOG/ncu_details.txt" 2>&1
step "done"
