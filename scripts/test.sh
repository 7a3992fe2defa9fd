#!/usr/bin/env bash
# Sets everything up and runs every test: the Release build's suites (unit, gradcheck, parity
# against PyTorch, cuda (skipped with one line when no GPU), slow), then the CPU code again under
# AddressSanitizer + UndefinedBehaviorSanitizer (unit suite).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)
(cd build && ctest -j"$jobs" --output-on-failure)
echo "== sanitizer build (ASan + UBSan, CPU code, unit tests)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DKILN_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs" --target kiln_tests_unit kiln_cli
# Less one case: the --checkpoint auto search repeats a whole ResNet18 meta-device run a dozen times (4.5
# minutes under the sanitizers, the CI's long pole); the other memory-prediction cases run those meta runs under
# the sanitizers, and the Release run above has the search itself.
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -j"$jobs" -L unit -E "checkpoint auto picks" --output-on-failure)
echo "all tests passed in $(( $(date +%s) - start )) s"
