#!/usr/bin/env bash
# kiln's main job: sets everything up (scripts/setup.sh: Debian packages, Release build), then trains
# the small CNN on Debian's Fashion-MNIST through the real JPEG path: the IDX files are written once as
# a grayscale JPEG image folder (quality 95, train/<class>/*.jpg + test/<class>/*.jpg; skipped when
# already there), then kiln trains from the folder on the CPU, decoding every JPEG each epoch with the
# threaded loader, and validates on the test split every epoch. It ends with the runs table of
# runs/fmnist, the training report (runs/fmnist/report.html: curves, memory timeline, the runs) and the
# test split's predictions from the saved weights alone (runs/fmnist/predictions.csv).
# Then a short segmentation run: `kiln export-images --segmentation` pastes Fashion-MNIST items on
# 64x64 canvases (mask = item class + 1, background 0; skipped when already there), a small UNet
# (unet_small: base width 8) trains on it for 2 epochs, the log ends with its validation
# mIoU and the mIoU of predicting background everywhere, and `kiln predict` writes mask and overlay
# PNGs for the validation images (runs/fmnist-seg/predictions/).
# Usage: scripts/main_job.sh [THREADS]   (JPEG folder: $KILN_FMNIST_JPEG, segmentation set: $KILN_FMNIST_SEG;
#        output: runs/fmnist, runs/fmnist-seg)
# The side-by-side with PyTorch (same model and hyper-parameters) is bench/compare_fmnist.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-$(nproc 2>/dev/null || echo 2)}
scripts/setup.sh --cli
DATA=/usr/share/datasets/fashion-mnist
JPEG=${KILN_FMNIST_JPEG:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/fashion-mnist-jpeg}
build/kiln export-images --data "$DATA" --out "$JPEG" --quality 95
build/kiln train --model small_cnn --data "$JPEG" --channels 1 --normalize auto --epochs 2 --batch 16 \
  --optimizer adamw --lr 1e-3 --weight-decay 5e-4 --schedule cosine --threads "$T" --workers 1 \
  --out runs/fmnist --save runs/fmnist/small_cnn.safetensors
build/kiln runs runs/fmnist
build/kiln report runs/fmnist -o runs/fmnist/report.html
# The weights carry the model, classes and preprocessing: predict needs no other flag and gives the run's
# validation accuracy (the same test split, the same eval transform).
build/kiln predict --weights runs/fmnist/small_cnn.safetensors --data "$JPEG" --threads "$T" \
  --out runs/fmnist/predictions.csv
# Segmentation: a small UNet on the exported set (2 epochs over its 2000 training images; the 400 val images).
SEG=${KILN_FMNIST_SEG:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/fashion-mnist-seg}
build/kiln export-images --segmentation "$SEG" --data "$DATA"
build/kiln train --task segment --model unet_small --data "$SEG" --channels 1 --epochs 2 --batch 16 \
  --optimizer adamw --lr 5e-3 --schedule cosine --threads "$T" --workers 1 \
  --out runs/fmnist-seg --save runs/fmnist-seg/unet_small.safetensors
# --force: a re-run overwrites the previous run's masks (predict refuses an existing output file without it).
build/kiln predict --weights runs/fmnist-seg/unet_small.safetensors --data "$SEG/val" --threads "$T" \
  --out runs/fmnist-seg/predictions --force
echo "main job done: weights in runs/fmnist/small_cnn.safetensors, the runs' records in runs/fmnist/runs.jsonl," \
  "the training report in runs/fmnist/report.html, the test split's predictions in runs/fmnist/predictions.csv;" \
  "segmentation: runs/fmnist-seg (unet_small.safetensors, runs.jsonl, predictions/*_mask.png and *_overlay.png)"
