#!/usr/bin/env bash
# Side by side: the small CNN on Fashion-MNIST (IDX files) trained by kiln and by PyTorch 1.13 (CPU)
# with the same model, data, hyper-parameters and thread count, one after the other on this machine.
# Usage: bench/compare_fmnist.sh [BUILD_DIR] [THREADS] [extra args for both, e.g. --epochs 1]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
T=${2:-2}
shift $(( $# > 2 ? 2 : $# ))
DATA=/usr/share/datasets/fashion-mnist
HP=(--epochs 2 --batch 16 --optimizer adamw --lr 1e-3 --weight-decay 5e-4 --schedule cosine --threads "$T")
echo "== kiln"
start=$(date +%s)
"$BUILD/kiln" train --model small_cnn --data "$DATA" "${HP[@]}" "$@" --out /tmp/kiln_compare_fmnist | grep -E "^epoch .* val"
kiln_s=$(( $(date +%s) - start ))
echo "kiln wall ${kiln_s} s"
echo "== torch"
/usr/bin/python3 bench/peers/train_small_cnn_torch.py --data "$DATA" "${HP[@]}" "$@"
