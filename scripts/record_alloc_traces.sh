#!/bin/sh
# Records the allocation traces bench/bench_alloc replays (bench/traces/*.trace): the first training
# step of ResNet18 at batch 16 and 64 (3 x 64 x 64 inputs) and of the small CNN at batch 64
# (1 x 28 x 28), on the CPU, through `kiln train --alloc-trace`. Synthetic npy data: the trace
# depends only on shapes. Usage: scripts/record_alloc_traces.sh [BUILD_DIR]
set -eu
BUILD=${1:-build}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 - "$TMP" <<'PY'
import sys, numpy as np
root = sys.argv[1]
for name, shape in (("rgb64", (64, 3, 64, 64)), ("gray28", (64, 1, 28, 28))):
    import os; os.makedirs(f"{root}/{name}")
    rng = np.random.default_rng(0)
    np.save(f"{root}/{name}/x.npy", rng.random(shape, dtype=np.float32))
    np.save(f"{root}/{name}/y.npy", (np.arange(shape[0]) % 10).astype(np.int64))
PY
mkdir -p bench/traces
for b in 16 64; do
  "$BUILD/kiln" train --model resnet18 --data "$TMP/rgb64" --num-classes 10 --batch $b --limit $b --epochs 1 \
    --device cpu --out "$TMP/run" --alloc-trace bench/traces/resnet18_b${b}_64px.trace
done
"$BUILD/kiln" train --model small_cnn --data "$TMP/gray28" --num-classes 10 --batch 64 --epochs 1 --device cpu \
  --out "$TMP/run" --alloc-trace bench/traces/small_cnn_b64_28px.trace
ls -l bench/traces
