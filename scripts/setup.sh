#!/usr/bin/env bash
# Installs the Debian packages kiln needs to build, test and run its main job (quick when they
# are already there), then configures and builds kiln in ./build (Release; CUDA when nvcc exists).
# Usage: scripts/setup.sh [--test | --cli] [extra cmake args...]
#   --test  also installs what only the tests need (and the pinned onnx/onnxruntime virtual environment
#           of the ONNX export test), and builds everything (tests, benchmarks)
#   --cli   builds only the `kiln` command (what the main job needs)
set -euo pipefail
cd "$(dirname "$0")/.."
for_tests=0
target=all
case "${1:-}" in
  --test) for_tests=1; shift ;;
  --cli) target=kiln_cli; shift ;;
esac

# libpng-dev: segmentation masks (palette PNGs read as indices, predicted masks written)
# openmpi-bin + libopenmpi-dev: data-parallel training (`mpirun -n N kiln train`, engine/dist/; KILN_MPI=AUTO)
# libonnx-dev + libprotobuf-dev: ONNX export (kiln export; the generated onnx .pb.h files ship in libonnx-dev,
# so protoc is not needed)
# libdnnl-dev: oneDNN, the bf16 CPU convolutions on AMX tiles / AVX512-BF16 (kernels/cpu/conv2d_bf16.h;
# KILN_ONEDNN=AUTO: without it bf16 takes the slow portable path)
packages=(build-essential cmake pkg-config libturbojpeg0-dev libjpeg62-turbo-dev libstb-dev doctest-dev libopenblas-dev
          nlohmann-json3-dev libcli11-dev zlib1g-dev libpng-dev python3-torch python3-torchvision python3-numpy python3-pil
          dataset-fashion-mnist libonnx-dev libprotobuf-dev openmpi-bin libopenmpi-dev libdnnl-dev)
# chromium renders the HTML memory report in its test; clang builds the sanitizer run and the
# libFuzzer targets (libclang-rt: the sanitizer and fuzzer runtimes, libomp: clang's OpenMP)
# python3-venv + python3-pip: the ONNX export test's onnxruntime oracle lives in its own virtual environment.
[ $for_tests -eq 1 ] && packages+=(chromium clang clang-14 libclang-rt-14-dev libomp-14-dev python3-venv python3-pip)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The ONNX export test's oracle (tests/parity/test_onnx_export.cpp): onnx and onnxruntime from pip, pinned,
# in a plain virtual environment (pip cannot install into Debian's python3, and must not replace the numpy
# that Debian's torch uses). KILN_ONNX_VENV moves it; the test reads KILN_ONNX_PYTHON (VENV/bin/python).
if [ $for_tests -eq 1 ]; then
  venv="${KILN_ONNX_VENV:-$HOME/.cache/kiln-onnx-venv}"
  pins=(numpy==1.26.4 onnx==1.17.0 onnxruntime==1.20.1)
  if ! "$venv/bin/python" -c "import onnx, onnxruntime, numpy; assert (numpy.__version__, onnx.__version__, onnxruntime.__version__) == ('1.26.4', '1.17.0', '1.20.1')" 2>/dev/null; then
    echo "setup: creating the onnx/onnxruntime virtual environment $venv (${pins[*]})"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$jobs" --target "$target"
