#!/usr/bin/env bash
# Sets everything up and runs every test: the Release build's suites (unit, gradcheck, parity
# against PyTorch, cuda (skipped with one line when no GPU), slow, mpi (data-parallel runs under mpirun;
# skipped with a message without MPI; never in the sanitizer run)), then the CPU code again under
# AddressSanitizer + UndefinedBehaviorSanitizer, built with clang (unit suite, the CPU execution mode of
# kiln's CUDA kernels (label cuda-cpu, kernels/cuda_cpu: out-of-bounds shared and global accesses), and
# each libFuzzer target of tests/fuzz over its seed corpus, fixed seed and input count).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)
(cd build && ctest -j"$jobs" --output-on-failure)
echo "== sanitizer build (clang, ASan + UBSan, CPU code: unit tests, the CUDA kernels in the CPU mode, fuzz targets)"
# A build-asan configured with another compiler (gcc, before the switch to clang) is configured afresh.
if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++' build-asan/CMakeCache.txt; then
  rm -rf build-asan/CMakeCache.txt build-asan/CMakeFiles
fi
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DKILN_BENCH=OFF -DKILN_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-asan -j"$jobs" --target kiln_tests_unit kiln_tests_cuda_cpu kiln_cli kiln_fuzz
# Left out of the sanitizer run (the Release run above has each of them): the --checkpoint auto search (a
# dozen whole ResNet18 meta-device runs) and the ResNet18 recompute equality cases (bit-for-bit numerics of
# whole-network passes, minutes under the sanitizers; the small_cnn recompute cases, which run the same
# recompute code, stay in), the ResNet50/101 cases (building and initializing 25-45 M parameters each, a
# kiln train subprocess, and a --max-batch search of 16 whole ResNet50 meta-device runs), and the PTX check (it runs nvcc, no kiln code). The fuzz label runs each libFuzzer
# target over its corpus with a fixed seed and input count (scripts/fuzz.sh explores with random seeds).
asan_skip="memory plan: every row|memory pre-flight|UNet memory|resnet50 and resnet101|resnet50_small|resnet50 at 224 px|checkpoint auto picks|checkpointed resnet18_small|checkpoint under autocast recomputes|checkpointing lowers the peak|the stages of resnet18|cuda ptx|the ResNets round-trip"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -j"$jobs" -L "unit|fuzz|cuda-cpu" -E "$asan_skip" --output-on-failure)
echo "all tests passed in $(( $(date +%s) - start )) s"
