#!/usr/bin/env bash
# session 8, call 7: v3 step overhead: c1 (scales in the consumers' order, 16-byte loads), c2 (+ unsigned stage arithmetic), c3 (+ shared-window addresses for the scale loads) vs main: bits, then A/B
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200
T0=$(date +%s); L=$OUT/c7; mkdir -p $L
K=$PWD/..
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.txt 2>&1; echo "pip rc=$?"
for c in main c1 c2 c3; do
  export PA_BENCH_KERNELS=$K/k_$c
  timeout -k 5 60 python3 $K/v3_hash.py > $L/hash_$c.txt 2>&1; echo "hash $c rc=$? at $(( $(date +%s) - T0 ))s"
done
for c in c1 c2 c3; do if diff -q $L/hash_main.txt $L/hash_$c.txt > /dev/null; then echo "$c: bits identical to main"; else echo "$c: DIFFERS"; diff $L/hash_main.txt $L/hash_$c.txt | head -5; fi; done
cat $L/hash_main.txt
for r in 1 2 3; do for c in main c1 c2 c3; do
  export PA_BENCH_KERNELS=$K/k_$c
  timeout -k 5 40 python3 -m pa_bench time --variant v3 --shapes 32Kx1024,64Kx512,0x1536,2.1Kx256 --max-seconds 2 --results $L/time_${c}_$r > $L/time_${c}_$r.txt 2>&1; echo "$c r$r rc=$? at $(( $(date +%s) - T0 ))s"
  grep -E "│ v3" $L/time_${c}_$r.txt | cut -c1-80 | head -6
done; done
rm -rf $L/time_*/*/
tar czf $OUT/c7.tgz -C $OUT c7 && rm -rf $L
echo "done at $(( $(date +%s) - T0 ))s"
