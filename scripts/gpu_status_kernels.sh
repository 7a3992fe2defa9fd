#!/usr/bin/env bash
# Prints the kernel table of docs/gpu-status.md from a test run: every __global__ kernel of kernels/cuda
# (by its KILN_KERNEL_BOUNDS declaration) and how many launches the CPU-mode tests (ctest -L cuda-cpu)
# made of it. Usage: scripts/gpu_status_kernels.sh [build folder, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
(cd "$build" && KILN_CUDA_CPU_LAUNCH_LOG="$log" ctest -L cuda-cpu >/dev/null)
echo "| file | kernel | CPU mode (launches in \`ctest -L cuda-cpu\`) | GPU |"
echo "|---|---|---|---|"
for f in kernels/cuda/*.cu kernels/cuda/*.h; do
  [ "$(basename "$f")" = kernel_launch.h ] && continue  # the macro itself
  { tr '\n' ' ' <"$f" | grep -oE 'KILN_KERNEL_BOUNDS\([^)]*\) +[A-Za-z_0-9]+\(' || true; } | sed -E 's/.*\) +//; s/\($//' |
    while read -r k; do
      n=$(grep -cx "$k" "$log" || true)
      if [ "$n" -gt 0 ]; then s="ran ($n)"; else s="compiled only"; fi
      echo "| $(basename "$f") | \`$k\` | $s | not run |"
    done
done
