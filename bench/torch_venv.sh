#!/bin/bash
# The current PyTorch as a benchmark peer (issue 35): creates (or checks) a virtual environment with a
# pinned PyTorch 2.x from pip, beside Debian's python3-torch 1.13, and prints its python's path on the
# last line of stdout. For the benchmarks only (bench_train_step --peer-python, bench/cpu_table.sh):
# it is not part of scripts/setup.sh, the README's setup or any test, and no test may depend on it.
#   bench/torch_venv.sh            create it if missing or not the pinned versions (quick when it is)
#   bench/torch_venv.sh --check    only check: exit 1 (and say how to create it) when it is not there
# KILN_TORCH_VENV moves it (default ~/.cache/kiln-torch-venv); KILN_TORCH_VENV_BASE is the python
# that creates it (default python3, as scripts/setup.sh's onnx venv; torch 2.15 needs python >= 3.11).
# Pins: torch 2.15.0 (the newest release on PyPI on 2026-12-06), numpy 2.4.6, pillow 13.0.0 (the
# small-CNN peer's JPEG-folder path decodes with PIL; there is no torchvision release for torch 2.15
# yet, so the peer reads the folder without it). PyPI's Linux torch wheel is the CUDA build: with its
# nvidia/cuda-toolkit wheels the environment is 5.4 GB (measured 2026-12-06; ~3 minutes to install here);
# a CPU-only wheel index was not reachable from this workplace. Kept out of Debian's python3 on
# purpose: pip must not replace the numpy that Debian's torch 1.13 uses.
set -euo pipefail
venv="${KILN_TORCH_VENV:-$HOME/.cache/kiln-torch-venv}"
base="${KILN_TORCH_VENV_BASE:-python3}"
pins=(torch==2.15.0 numpy==2.4.6 pillow==13.0.0)
check='import torch, numpy, PIL; assert (torch.__version__.split("+")[0], numpy.__version__, PIL.__version__) == ("2.15.0", "2.4.6", "13.0.0"), (torch.__version__, numpy.__version__, PIL.__version__)'
if "$venv/bin/python" -c "$check" 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "torch_venv: no pinned torch 2.x venv at $venv (create it with bench/torch_venv.sh: ${pins[*]}, 5.4 GB)" >&2
  exit 1
fi
echo "torch_venv: creating $venv with ${pins[*]} from pip (a few GB of wheels; minutes)" >&2
rm -rf "$venv"
"$base" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}" >&2
"$venv/bin/python" -c "$check"
"$venv/bin/pip" freeze --disable-pip-version-check > "$venv/kiln-freeze.txt"
echo "torch_venv: done, $(du -sh "$venv" | cut -f1) on disk; every package's version: $venv/kiln-freeze.txt" >&2
echo "$venv/bin/python"
