#!/bin/bash
# The CPU-speed table of docs/cpu-profile.md and the README, kiln against its PyTorch peers in the same
# run on this machine: ResNet18 train steps (build/bench_train_step: kiln and torch in one process run,
# medians of 5 steps each), and small-CNN training images/s on Fashion-MNIST, in memory (IDX files) and
# from the main job's JPEG folder (decoded every epoch, 1 loader worker), SGD 0.05 momentum 0.9, 6400
# images, 1 epoch (evaluation excluded from images/s). RUNS runs of each row, kiln and torch
# alternating; prints each run and the median of kiln's time / torch's time (the goal: <= 0.9 on the
# ResNet18 rows, <= 0.8 on the small-CNN rows). Timing only: no assertions, never a test.
#   bench/cpu_table.sh [RUNS=5] [THREADS="1 2"] [BATCHES="16 64 128"]
# Needs a Release build with the benches (scripts/setup.sh builds one) and /usr/bin/python3 with torch.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
THREADS=${2:-"1 2"}
BATCHES=${3:-"16 64 128"}
DATA=/usr/share/datasets/fashion-mnist
JPEG=${KILN_FMNIST_JPEG:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/fashion-mnist-jpeg}
for f in build/kiln build/bench_train_step; do
  [ -x "$f" ] || { echo "cpu_table: $f is missing (build with scripts/setup.sh first)" >&2; exit 1; }
done
[ -d "$JPEG/train" ] || build/kiln export-images --data "$DATA" --out "$JPEG" --quality 95 >/dev/null

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "cpu_table: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $RUNS runs, $(date -u +%F)"

echo "== ResNet18 train step (build/bench_train_step --threads T --steps 5 --warmup 1): kiln ms / torch ms"
for t in $THREADS; do
  declare -A ratios=()
  for r in $(seq "$RUNS"); do
    while read -r shape k tt ratio _; do
      echo "  $t thread(s) $shape run $r: $k / $tt = ${ratio}"
      ratios[$shape]+="${ratio%x} "
    done < <(build/bench_train_step --threads "$t" --steps 5 --warmup 1 2>/dev/null | grep -E '^(8x224|32x64) ')
  done
  for shape in 8x224 32x64; do
    echo "ResNet18 $shape $t thread(s): median kiln/torch $(tr ' ' '\n' <<< "${ratios[$shape]}" | grep . | median)"
  done
  unset ratios
done

# One small-CNN row: kiln train and the peer on the same data, alternating; prints the median time ratio.
small_cnn() {  # $1 label, $2 data, $3 threads, $4 batch, $5... extra kiln flags
  local label=$1 data=$2 t=$3 b=$4
  shift 4
  local rs="" r k p t0 t1 t2
  for r in $(seq "$RUNS"); do
    t0=$(date +%s.%N)
    k=$(build/kiln train --model small_cnn --data "$data" "$@" --limit 6400 --epochs 1 --batch "$b" --threads "$t" \
          --optimizer sgd --lr 0.05 --momentum 0.9 2>&1 | sed -n 's/.*train loss.* \([0-9.]*\) img\/s.*/\1/p')
    t1=$(date +%s.%N)
    p=$(/usr/bin/python3 bench/peers/train_small_cnn_torch.py --data "$data" --epochs 1 --batch "$b" --threads "$t" \
          --limit 6400 --workers 1 2>/dev/null | sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p')
    t2=$(date +%s.%N)
    echo "  $label $t thread(s) batch $b run $r: kiln $k img/s ($(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s wall)," \
         "torch $p img/s ($(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.1f", b - a}') s wall; wall includes start-up and evaluation)"
    rs+="$(awk -v k="$k" -v p="$p" 'BEGIN {printf "%.3f", p / k}') "
  done
  echo "small CNN $label, $t thread(s), batch $b: median kiln/torch time $(tr ' ' '\n' <<< "$rs" | grep . | median)"
}

echo "== small CNN, Fashion-MNIST in memory (IDX): kiln train vs bench/peers/train_small_cnn_torch.py"
for t in $THREADS; do for b in $BATCHES; do small_cnn memory "$DATA" "$t" "$b"; done; done
echo "== small CNN, the main job's JPEG folder ($JPEG), 1 loader worker each"
for t in $THREADS; do for b in $BATCHES; do small_cnn jpeg "$JPEG" "$t" "$b" --channels 1 --normalize auto --workers 1; done; done
