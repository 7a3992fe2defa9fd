#!/usr/bin/env bash
# Sets everything up and runs every test: the Release build's suites (unit, gradcheck, parity
# against PyTorch, cuda (skipped with one line when no GPU), slow), then the CPU code again under
# AddressSanitizer + UndefinedBehaviorSanitizer, built with clang (unit suite, and each libFuzzer
# target of tests/fuzz for ~5 s over its seed corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)
(cd build && ctest -j"$jobs" --output-on-failure)
echo "== sanitizer build (clang, ASan + UBSan, CPU code: unit tests, fuzz targets)"
# A build-asan configured with another compiler (gcc, before the switch to clang) is configured afresh.
if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++' build-asan/CMakeCache.txt; then
  rm -rf build-asan/CMakeCache.txt build-asan/CMakeFiles
fi
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DKILN_BENCH=OFF -DKILN_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-asan -j"$jobs" --target kiln_tests_unit kiln_cli kiln_fuzz
# Less one case: the --checkpoint auto search repeats a whole ResNet18 meta-device run a dozen times (4.5
# minutes under the sanitizers, the CI's long pole); the other memory-prediction cases run those meta runs under
# the sanitizers, and the Release run above has the search itself.
# The fuzz label runs each libFuzzer target for 5 s (scripts/fuzz.sh runs them longer).
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -j"$jobs" -L "unit|fuzz" -E "checkpoint auto picks" --output-on-failure)
echo "all tests passed in $(( $(date +%s) - start )) s"
