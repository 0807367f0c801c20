#!/usr/bin/env bash
# session 8, call 3: flat persistent consumer: v3 GPU tests, sanitizers (forced persistent), A/B main vs grid vs persistent
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200
T0=$(date +%s); DEADLINE=$((T0 + 300)); L=$OUT/c3; mkdir -p $L
K=$PWD/..
step() { local cap=$1; shift; local left=$((DEADLINE - $(date +%s))); local t=$(( cap < left ? cap : left ));
  if [ $t -le 15 ]; then echo "[skip: no time] $*"; return 99; fi
  echo "[$(( $(date +%s) - T0 ))s] (cap ${t}s) ${1##*/} ${2:-} ${3:-}"; timeout -k 5 $t "$@"; local rc=$?; echo "  rc=$rc at $(( $(date +%s) - T0 ))s"; return $rc; }
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.txt 2>&1; echo "pip rc=$?"
step 100 python3 -m pytest -m gpu -q -x tests/gpu/test_v3_gpu.py > $L/test_v3.txt 2>&1; T=$?; tail -25 $L/test_v3.txt | cut -c1-300
if [ $T -ne 0 ]; then tar czf $OUT/c3.tgz -C $OUT c3; echo "tests failed: stop"; exit 0; fi
for tool in memcheck racecheck synccheck; do
  PA_BENCH_PERSISTENT=3 step 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/sanitize_target.py --only v3 --small > $L/san_$tool.txt 2>&1; tail -2 $L/san_$tool.txt
done
for r in 1 2 3; do for c in base grid pers; do
  case $c in base) export PA_BENCH_KERNELS=$K/k_main PA_BENCH_PERSISTENT=0;; grid) unset PA_BENCH_KERNELS; export PA_BENCH_PERSISTENT=0;; pers) unset PA_BENCH_KERNELS PA_BENCH_PERSISTENT;; esac
  step 40 python3 -m pa_bench time --variant v3 --shapes 32Kx1024,64Kx512,0x1536,2.1Kx256 --max-seconds 2 --results $L/time_${c}_$r > $L/time_${c}_$r.txt 2>&1
  grep -E "│ v3" $L/time_${c}_$r.txt | cut -c1-80 | head -6
done; done
unset PA_BENCH_KERNELS PA_BENCH_PERSISTENT
grep -rho '"persistent": {[^}]*}' $L/time_pers_1 | head -8
rm -rf $L/time_*/*/
tar czf $OUT/c3.tgz -C $OUT c3 && rm -rf $L
echo "done at $(( $(date +%s) - T0 ))s"
