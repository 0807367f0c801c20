#!/usr/bin/env bash
# session 8, call 2: v3 persistent launch (uncommitted tree): v3 GPU tests, sanitizers on a forced persistent launch, A/B grid vs persistent
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200
T0=$(date +%s); DEADLINE=$((T0 + 330)); L=$OUT/c2; mkdir -p $L
step() { local cap=$1; shift; local left=$((DEADLINE - $(date +%s))); local t=$(( cap < left ? cap : left ));
  if [ $t -le 15 ]; then echo "[skip: no time] $*"; return 99; fi
  echo "[$(( $(date +%s) - T0 ))s] (cap ${t}s) ${1##*/} ${2:-} ${3:-}"; timeout -k 5 $t "$@"; local rc=$?; echo "  rc=$rc at $(( $(date +%s) - T0 ))s"; return $rc; }
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.txt 2>&1; echo "pip rc=$?"
step 120 python3 -m pytest -m gpu -q -x tests/gpu/test_v3_gpu.py > $L/test_v3.txt 2>&1; T=$?; tail -25 $L/test_v3.txt | cut -c1-300
if [ $T -ne 0 ]; then tar czf $OUT/c2.tgz -C $OUT c2; echo "tests failed: stop"; exit 0; fi
for tool in memcheck racecheck synccheck; do
  PA_BENCH_PERSISTENT=3 step 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/sanitize_target.py --only v3 --small > $L/san_$tool.txt 2>&1; tail -3 $L/san_$tool.txt
done
for r in 1 2 3; do for c in 0 ""; do
  n=${c:-rule}; PA_BENCH_PERSISTENT=$c step 40 python3 -m pa_bench time --variant v3 --shapes 32Kx1024,64Kx512,0x1536,2.1Kx256 --max-seconds 2 --results $L/time_${n}_$r > $L/time_${n}_$r.txt 2>&1
  grep -E "│ v3" $L/time_${n}_$r.txt | cut -c1-80 | head -6
done; done
grep -rho '"persistent": {[^}]*}' $L/time_rule_1 | head -8; grep -rho '"segment_keys": [0-9]*' $L/time_rule_1 | sort | uniq -c
rm -rf $L/time_*/*/
find $L -name "*.csv" -path "*time_*" | head -0
tar czf $OUT/c2.tgz -C $OUT c2 && rm -rf $L
echo "done at $(( $(date +%s) - T0 ))s"
