#!/usr/bin/env bash
# Regenerates the numbers of docs/memory-tradeoffs.md: ResNet18 at 224 px, effective batch 16, on the CPU,
# one `kiln train` per configuration on 32 random images (2 optimizer steps); prints, per configuration,
# kiln's meta-device prediction beside the measured first step (peak allocated, peak reserved) and the
# epoch time. Usage: scripts/memory_tradeoffs.sh [BUILD_DIR]   (default build; needs build/kiln)
set -euo pipefail
BUILD=${1:-build}
KILN=$(cd "$BUILD" && pwd)/kiln
[ -x "$KILN" ] || { echo "memory_tradeoffs: $KILN not built (cmake --build $BUILD --target kiln_cli)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 -c "import numpy as np; np.random.seed(0); np.save('$TMP/x.npy', np.random.rand(32,3,224,224).astype(np.float32)); np.save('$TMP/y.npy', np.arange(32)%10)"
printf '%-28s | %s\n' "configuration" "first step (measured vs predicted), epoch time"
for cfg in "" "--checkpoint 4" "--checkpoint 10" "--accum 4" "--checkpoint 4 --accum 4" "--amp"; do
  # shellcheck disable=SC2086
  out=$("$KILN" train --model resnet18 --data "$TMP" --num-classes 10 --epochs 1 --batch 16 --threads 2 --device cpu \
        --lr 0.01 --out "$TMP/run" $cfg 2>&1) || { echo "$out" | tail -3; exit 1; }
  first=$(echo "$out" | grep -m1 "^memory first step:" | sed 's/^memory first step: //')
  secs=$(echo "$out" | grep -m1 -o "[0-9.]* s  peak" | sed 's/  peak//')
  saved=$(echo "$out" | grep -m1 -o "activation [0-9.]* MiB" | head -1)
  printf '%-28s | %s; %s; epoch %s\n' "${cfg:-f32}" "$first" "$saved" "$secs"
done
