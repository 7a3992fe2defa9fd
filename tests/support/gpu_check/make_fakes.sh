#!/usr/bin/env bash
# tests/support/gpu_check/make_fakes.sh DIR [no-gpu]: a GPU-less stand-in for what tools/gpu-check talks to,
# for tests/unit/test_gpu_check.cpp. DIR/bin: nvidia-smi that lists an H200 (or, with no-gpu, none),
# compute-sanitizer that refuses the device, python3 whose torch imports but whose peer script crashes.
# DIR/build: the programs gpu-check runs, each answering the way kiln's own answer on a machine without a
# GPU (cuda test cases that skip, benchmarks that find no GPU). Nothing here may ever look like a GPU result.
set -eu
D=$1
mkdir -p "$D/bin" "$D/build"
if [ "${2:-}" = no-gpu ]; then
  printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' >"$D/bin/nvidia-smi"
else
  cat >"$D/bin/nvidia-smi" <<'S'
#!/bin/sh
case "$*" in
  *--query-gpu*) echo "NVIDIA H200, 143771 MiB, 580.159.04" ;;
  *) echo "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |" ;;
esac
S
fi
printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n' >"$D/bin/nvcc"
# compute-sanitizer: refuses the device (default), or with FAKE_SANITIZER=record appends "DIR: ARGS" to
# $FAKE_SANITIZER_LOG and runs the program after its options (so the fake cuda tests answer: they skip),
# or with FAKE_SANITIZER=errors reports two errors as a real one would, exit 99.
cat >"$D/bin/compute-sanitizer" <<'S'
#!/bin/sh
case "${FAKE_SANITIZER:-refuse}" in
  record)
    echo "$(pwd): $*" >>"$FAKE_SANITIZER_LOG"
    echo "========= COMPUTE-SANITIZER"
    while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift 2; done  # --tool X --error-exitcode N
    "$@"; rc=$?
    echo "========= ERROR SUMMARY: 0 errors"
    exit $rc ;;
  errors)
    echo "========= COMPUTE-SANITIZER"
    echo "========= Invalid __global__ read of size 4 bytes"
    echo "========= ERROR SUMMARY: 2 errors"
    exit 99 ;;
esac
echo "========= COMPUTE-SANITIZER"
echo "========= Error: Device not supported. Please refer to the documentation for the supported devices."
exit 255
S
cat >"$D/bin/python3" <<'S'
#!/bin/sh
# -c: the import probes succeed (and write nothing); a script on stdin: the torch peer crashes.
if [ "${1:-}" = "-" ]; then
  if grep -q torchvision.models; then
    echo "Traceback (most recent call last):"; echo "RuntimeError: CUDA error: no CUDA-capable device is detected"
    exit 1
  fi
  exit 0
fi
exit 0
S
cat >"$D/build/kiln_tests_cuda" <<'S'
#!/bin/sh
# Three cases: one prints the shared skip line and still "passes", one doctest does not run, one passes.
case "$*" in
  *--list-test-cases*)
    printf '[doctest] doctest version is "2.4.9"\n[doctest] run with "--help" for options\n'
    printf '===============================================================================\n'
    printf '[doctest] listing all test case names\n'
    printf '===============================================================================\n'
    printf 'cuda: one case, with a comma\ncuda: another case\ncuda: a case that passes\n'
    printf '===============================================================================\n'
    printf '[doctest] unskipped test cases passing the current filters: 3\n' ;;
  *"--test-case=cuda: one case\, with a comma"*)
    echo "test_cuda_fake.cpp:10: MESSAGE: cuda tests skipped: fake: the NVIDIA driver reports no CUDA device"
    echo "[doctest] test cases: 1 | 1 passed | 0 failed | 2 skipped" ;;
  *"--test-case=cuda: another case"*)  # marked doctest::skip: nothing ran (tests/support/main.cpp exits 1)
    echo "[doctest] test cases: 0 | 0 passed | 0 failed | 3 skipped"; exit 1 ;;
  *"--test-case=cuda: a case that passes"*)  # doctest counts the two cases the filter left out as skipped
    echo "[doctest] test cases: 1 | 1 passed | 0 failed | 2 skipped" ;;
  "" | --source-file=*)  # every case (or a file filter) in one process, as under compute-sanitizer
    echo "test_cuda_fake.cpp:10: MESSAGE: cuda tests skipped: fake: the NVIDIA driver reports no CUDA device"
    echo "[doctest] test cases: 3 | 3 passed | 0 failed | 0 skipped" ;;
  *) echo "kiln_tests_cuda (fake): unexpected arguments: $*"; exit 64 ;;
esac
S
for b in bench_gpu_gemm bench_gpu_conv; do
  printf '#!/bin/sh\necho "no GPU: fake: the NVIDIA driver reports no CUDA device"\nexit 0\n' >"$D/build/$b"
done
cat >"$D/build/bench_train_step" <<'S'
#!/bin/sh
echo "ResNet18 training step (SGD momentum), kiln on cuda:0"
echo "bench_train_step: error: --device cuda:0: the NVIDIA driver reports no CUDA device" >&2
exit 1
S
cat >"$D/build/kiln" <<'S'
#!/bin/sh
case "$1" in
  devices) printf 'cpu: available\ncuda: runtime 13.0, driver none\nno GPU: fake: no NVIDIA driver found\n' ;;
  *) echo "kiln: error: --device cuda:0: fake: no NVIDIA driver found" >&2; exit 1 ;;
esac
S
chmod +x "$D"/bin/* "$D"/build/*
