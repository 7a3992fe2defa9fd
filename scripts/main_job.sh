#!/bin/sh
# kiln's main job: the small CNN on Debian's Fashion-MNIST (apt install dataset-fashion-mnist) through
# the real JPEG path: the IDX files are written once as a grayscale JPEG image folder (quality 95,
# train/<class>/*.jpg + test/<class>/*.jpg; skipped when already there), then kiln trains from the
# folder on the CPU, decoding every JPEG each epoch with the threaded loader. Then the same model and
# hyper-parameters in PyTorch (from the IDX files) side by side.
# Usage: scripts/main_job.sh [BUILD_DIR] [THREADS]   (JPEG folder: $KILN_FMNIST_JPEG, default below)
set -eu
BUILD=${1:-build}
T=${2:-2}
DATA=/usr/share/datasets/fashion-mnist
JPEG=${KILN_FMNIST_JPEG:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/fashion-mnist-jpeg}
"$BUILD/kiln" export-images --data "$DATA" --out "$JPEG" --quality 95
# Measured (2 shared cores, loaded machine): AdamW 2e-3 wd 5e-4 cosine 90.66% val in 5:00 wall;
# SGD lr 0.05 momentum 0.9 cosine 89.87% in 3:32 (the IDX path's 90.2% setting).
"$BUILD/kiln" train --model small_cnn --data "$JPEG" --channels 1 --normalize auto --epochs 2 --batch 64 \
  --optimizer adamw --lr 2e-3 --weight-decay 5e-4 --schedule cosine --threads "$T" --workers 1 \
  --out runs/fmnist --save runs/fmnist/small_cnn.safetensors
# PyTorch peer (it has no LR schedule option: constant lr)
/usr/bin/python3 bench/peers/train_small_cnn_torch.py --data "$DATA" --epochs 2 --batch 64 --optimizer sgd \
  --lr 0.05 --momentum 0.9 --threads "$T"
