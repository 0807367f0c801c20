#!/usr/bin/env bash
# session 8, call 1: A/B of main (step 8) vs the staging-prefetch branch vs main with the prefetch's register split (120/192), three alternations
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200
T0=$(date +%s); DEADLINE=$((T0 + 230)); L=$OUT/c1; mkdir -p $L
K=$PWD/..
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.txt 2>&1; echo "pip rc=$?"
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
for r in 1 2 3; do for c in main pf r192; do
  left=$((DEADLINE - $(date +%s))); [ $left -lt 20 ] && { echo "no time"; break 2; }
  export PA_BENCH_KERNELS=$K/k_$c
  timeout -k 5 40 python3 -m pa_bench time --variant v3 --shapes 32Kx1024,64Kx512,0x1536,2.1Kx256 --max-seconds 2 --results $L/time_${c}_$r > $L/time_${c}_$r.txt 2>&1; echo "time $c r$r rc=$? at $(( $(date +%s) - T0 ))s"
  grep -E "│ v3" $L/time_${c}_$r.txt | cut -c1-80 | head -6
done; done
rm -rf $L/time_*/*/
tar czf $OUT/c1.tgz -C $OUT c1 && rm -rf $L
echo "done at $(( $(date +%s) - T0 ))s"
