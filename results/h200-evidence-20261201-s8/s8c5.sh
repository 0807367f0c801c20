#!/usr/bin/env bash
# session 8, call 5: which role regressed in grid mode: base (main) vs new vs h1 (new producer + main's consumer) vs h2 (main's producer + new consumer)
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200 PA_BENCH_PERSISTENT=0
T0=$(date +%s); L=$OUT/c5; mkdir -p $L
K=$PWD/..
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.txt 2>&1; echo "pip rc=$?"
for r in 1 2; do for c in main new h1 h2; do
  if [ $c = new ]; then unset PA_BENCH_KERNELS; else export PA_BENCH_KERNELS=$K/k_$c; fi
  timeout -k 5 40 python3 -m pa_bench time --variant v3 --shapes 32Kx1024,64Kx512,0x1536 --max-seconds 2 --results $L/time_${c}_$r > $L/time_${c}_$r.txt 2>&1; echo "$c r$r rc=$? at $(( $(date +%s) - T0 ))s"
  grep -E "│ v3" $L/time_${c}_$r.txt | cut -c1-80 | head -6
done; done
rm -rf $L/time_*/*/
tar czf $OUT/c5.tgz -C $OUT c5 && rm -rf $L
echo "done at $(( $(date +%s) - T0 ))s"
