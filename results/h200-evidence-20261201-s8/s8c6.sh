#!/usr/bin/env bash
# session 8, call 6: branch v3-persistent + __syncwarp after the piece's end: v3 GPU tests, then A/B main vs branch grid vs branch persistent
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200
T0=$(date +%s); L=$OUT/c6; mkdir -p $L
K=$PWD/..
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.txt 2>&1; echo "pip rc=$?"
timeout -k 5 80 python3 -m pytest -m gpu -q -x tests/gpu/test_v3_gpu.py > $L/test_v3.txt 2>&1; echo "tests rc=$?"; tail -3 $L/test_v3.txt | cut -c1-200
for r in 1 2; do for c in main grid pers; do
  case $c in main) export PA_BENCH_KERNELS=$K/k_main PA_BENCH_PERSISTENT=0;; grid) unset PA_BENCH_KERNELS; export PA_BENCH_PERSISTENT=0;; pers) unset PA_BENCH_KERNELS PA_BENCH_PERSISTENT;; esac
  timeout -k 5 40 python3 -m pa_bench time --variant v3 --shapes 32Kx1024,64Kx512,0x1536 --max-seconds 2 --results $L/time_${c}_$r > $L/time_${c}_$r.txt 2>&1; echo "$c r$r rc=$? at $(( $(date +%s) - T0 ))s"
  grep -E "│ v3" $L/time_${c}_$r.txt | cut -c1-80 | head -6
done; done
rm -rf $L/time_*/*/
tar czf $OUT/c6.tgz -C $OUT c6 && rm -rf $L
echo "done at $(( $(date +%s) - T0 ))s"
