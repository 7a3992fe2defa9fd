#!/usr/bin/env bash
# The main job's segmentation part (scripts/main_job.sh runs it; the slow test "main job segmentation"
# runs it as it is and checks a floor on its mIoU): `kiln export-images --segmentation --classes shapes`
# pastes 2-4 Fashion-MNIST items on 64x64 canvases, each item's mask is its outline group (top, trouser,
# footwear, bag; background 0; the four groups equally common; skipped when already exported), a small
# UNet (unet_small: base width 8, depth 4) trains on the 2000 training canvases for 6 epochs, the log ends
# with its validation mIoU beside the mIoU of predicting background everywhere, and `kiln predict` writes a
# mask and an overlay PNG for each of the 400 validation canvases. The same run in PyTorch:
# bench/peers/train_unet_torch.py --data SEG (docs/segmentation.md has both, measured).
# Usage: scripts/segmentation_demo.sh [THREADS]
#   KILN (default build/kiln), KILN_FMNIST_SEG (the exported set), KILN_SEG_OUT (default runs/fmnist-seg)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-$(nproc 2>/dev/null || echo 2)}
KILN=${KILN:-build/kiln}
SEG=${KILN_FMNIST_SEG:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/fashion-mnist-seg}
OUT=${KILN_SEG_OUT:-runs/fmnist-seg}
"$KILN" export-images --segmentation "$SEG" --classes shapes --data /usr/share/datasets/fashion-mnist
"$KILN" train --task segment --model unet_small --data "$SEG" --channels 1 --epochs 6 --batch 16 \
  --optimizer adamw --lr 5e-3 --schedule cosine --threads "$T" --workers 1 \
  --out "$OUT" --save "$OUT/unet_small.safetensors"
# --force: a re-run overwrites the previous run's masks (predict refuses an existing output file without it).
"$KILN" predict --weights "$OUT/unet_small.safetensors" --data "$SEG/val" --threads "$T" \
  --out "$OUT/predictions" --force
