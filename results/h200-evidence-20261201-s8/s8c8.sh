#!/usr/bin/env bash
# session 8, call 8: v3's step loop unrolled by 2 (u2) and by 4 (u4) vs main: bits, then A/B, two rounds
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200
T0=$(date +%s); L=$OUT/c8; mkdir -p $L
K=$PWD/..
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.txt 2>&1; echo "pip rc=$?"
for c in main u2 u4; do
  export PA_BENCH_KERNELS=$K/k_$c
  timeout -k 5 60 python3 $K/v3_hash.py > $L/hash_$c.txt 2>&1; echo "hash $c rc=$? at $(( $(date +%s) - T0 ))s"
done
for c in u2 u4; do if diff -q $L/hash_main.txt $L/hash_$c.txt > /dev/null; then echo "$c: bits identical to main"; else echo "$c: DIFFERS"; fi; done
for r in 1 2; do for c in main u2 u4; do
  export PA_BENCH_KERNELS=$K/k_$c
  timeout -k 5 40 python3 -m pa_bench time --variant v3 --shapes 32Kx1024,64Kx512,0x1536,2.1Kx256 --max-seconds 2 --results $L/time_${c}_$r > $L/time_${c}_$r.txt 2>&1; echo "$c r$r rc=$? at $(( $(date +%s) - T0 ))s"
  grep -E "│ v3" $L/time_${c}_$r.txt | cut -c1-80 | head -6
done; done
rm -rf $L/time_*/*/
tar czf $OUT/c8.tgz -C $OUT c8 && rm -rf $L
echo "done at $(( $(date +%s) - T0 ))s"
