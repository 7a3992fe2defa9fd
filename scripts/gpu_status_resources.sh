#!/usr/bin/env bash
# Prints the "Registers, shared memory and stack" table of docs/gpu-status.md: runs the unit test that reads
# every kernel's resource usage from the cubins in the built kernels/cuda/*.cu.o (sm_80, sm_90;
# tests/unit/test_cuda_ptx_resources.cpp) and prints the table it wrote. Needs a CUDA build (KILN_CUDA on).
# Usage: scripts/gpu_status_resources.sh [build folder, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rm -f "$build/ptx_check/resources.md"
(cd "$build" && ctest -R "cuda ptx resources: every kernel" --output-on-failure >/dev/null)
if [ ! -s "$build/ptx_check/resources.md" ]; then
  echo "no table: the test skipped (no CUDA objects in $build?)" >&2
  exit 1
fi
cat "$build/ptx_check/resources.md"
