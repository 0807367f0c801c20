#!/usr/bin/env bash
# session 8, last call: the whole GPU suite on HEAD (v3.cu changed by comments since session 7's pass)
set -uo pipefail
cd "$(dirname "$0")/clean"
export PYTHONUNBUFFERED=1 COLUMNS=200
python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1; echo "pip rc=$?"
git_head=$(cat ../head.txt 2>/dev/null); echo "tree: $git_head"
timeout -k 5 280 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider > $OUT/pytest_gpu.txt 2>&1; echo "pytest rc=$?"
tail -4 $OUT/pytest_gpu.txt
