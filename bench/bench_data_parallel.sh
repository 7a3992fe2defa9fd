#!/usr/bin/env bash
# Data-parallel training throughput: kiln at 1 and 2 ranks (mpirun, one thread each) against PyTorch 1.13
# DDP over gloo at 1 and 2 processes (bench/peers/ddp_torch.py), alternating in the same run, on the same
# model, per-rank batch, optimizer (SGD, momentum 0.9) and data held in memory (npy):
#   small_cnn on Fashion-MNIST-sized images (1x28x28, 10 classes: the first images of Debian's
#   /usr/share/datasets/fashion-mnist, or random ones without it), per-rank batch 64 and 16;
#   resnet18 (torchvision's layout) on random 3x64x64 images, 10 classes, per-rank batch 16.
# Each run trains S warm-up steps, then S timed steps (kiln: 2 epochs of S steps, the second epoch's
# img/s, no --val; torch: between two barriers). Prints images/s (global), the scaling efficiency
# (2-rank / (2 x 1-rank)) and kiln's communication per step (the wait after backward that backward did
# not hide, and the all-reduce time), from the 2-rank run's second epoch. "kiln_2x1" is the machine's
# ceiling for 2 ranks: two independent 1-rank kiln runs at the same time (no communication at all), their
# images/s summed; "of_ceil" is the 2-rank run's share of it (communication's cost, apart from the machine's).
# Usage: bench/bench_data_parallel.sh [BUILD_DIR] [REPEATS]   (a couple of minutes with REPEATS=1)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-1}
WORK=${KILN_BENCH_DIR:-/tmp/kiln_bench_data_parallel}
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

/usr/bin/python3 - "$WORK" <<'EOF'
import gzip, os, sys
import numpy as np
work = sys.argv[1]
def save(name, x, y):
    os.makedirs(os.path.join(work, name), exist_ok=True)
    np.save(os.path.join(work, name, "x.npy"), x.astype(np.float32))
    np.save(os.path.join(work, name, "y.npy"), y.astype(np.int64))
rng = np.random.default_rng(0)
fm = "/usr/share/datasets/fashion-mnist"
n = 4096
if os.path.exists(os.path.join(fm, "train-images-idx3-ubyte.gz")):
    x = np.frombuffer(gzip.decompress(open(os.path.join(fm, "train-images-idx3-ubyte.gz"), "rb").read()), np.uint8, offset=16)
    y = np.frombuffer(gzip.decompress(open(os.path.join(fm, "train-labels-idx1-ubyte.gz"), "rb").read()), np.uint8, offset=8)
    x = (x.reshape(-1, 1, 28, 28)[:n].astype(np.float32) / 255 - 0.286) / 0.353
    y = y[:n]
else:
    x, y = rng.standard_normal((n, 1, 28, 28)), rng.integers(0, 10, n)
save("fmnist", x, y)
save("rgb64", rng.standard_normal((512, 3, 64, 64)), rng.integers(0, 10, 512))
EOF

# kiln RANKS MODEL DATA BATCH STEPS -> "images/s wait_ms allreduce_ms"
kiln_run() {
  local ranks=$1 model=$2 data=$3 batch=$4 steps=$5 out
  local args=(train --model "$model" --data "$WORK/$data" --limit $((ranks * batch * steps)) --epochs 2
              --batch "$batch" --optimizer sgd --lr 0.05 --momentum 0.9 --threads 1 --workers 0 --device cpu --seed 1)
  if [ "$ranks" = 1 ]; then out=$("$BUILD/kiln" "${args[@]}" 2>&1)
  else out=$(mpirun -n "$ranks" "$BUILD/kiln" "${args[@]}" 2>&1); fi
  local ips comm
  # (not anchored: under mpirun a rank's progress text may share the line)
  ips=$(grep -oE "epoch 2/2  train loss.*" <<<"$out" | grep -oE "[0-9.]+ img/s" | cut -d' ' -f1)
  comm=$(grep -oE "data-parallel: communication per step.*" <<<"$out" | tail -1 |
         sed -E 's/.*: ([0-9.]+) ms not hidden by backward, ([0-9.]+) ms all-reduce.*/\1 \2/')
  [ -n "$ips" ] || { echo "kiln failed:" >&2; echo "$out" | tail -5 >&2; exit 1; }
  echo "$ips ${comm:-- -}"
}
# Two independent 1-rank runs at once: RANKS=1 MODEL DATA BATCH STEPS -> summed images/s
kiln_pair() {
  local model=$1 data=$2 batch=$3 steps=$4 a b
  a=$(mktemp) b=$(mktemp)
  kiln_run 1 "$model" "$data" "$batch" "$steps" > "$a" &
  local pa=$!
  kiln_run 1 "$model" "$data" "$batch" "$steps" > "$b" &
  local pb=$!
  wait "$pa" && wait "$pb" || { rm -f "$a" "$b"; exit 1; }
  awk '{ s += $1 } END { printf "%.0f", s }' "$a" "$b"
  rm -f "$a" "$b"
}
torch_run() {
  local nproc=$1 model=$2 data=$3 batch=$4 steps=$5
  /usr/bin/python3 bench/peers/ddp_torch.py --model "$model" --data "$WORK/$data" --batch "$batch" --nproc "$nproc" \
    --steps "$steps" --warmup "$steps" | grep -oE '"images_per_s": [0-9.]+' | cut -d' ' -f2
}

printf "%-22s %-5s %12s %12s %12s %12s %12s %9s %9s %8s %16s\n" model batch kiln_1 kiln_2 kiln_2x1 torch_1 torch_2 \
  kiln_eff torch_eff of_ceil "kiln_comm_ms"
for rep in $(seq "$REPEATS"); do
  for cfg in "small_cnn fmnist 64 15" "small_cnn fmnist 16 30" "resnet18 rgb64 16 6"; do
    read -r model data batch steps <<<"$cfg"
    read -r k1 _ _ <<<"$(kiln_run 1 "$model" "$data" "$batch" "$steps")"
    t1=$(torch_run 1 "$model" "$data" "$batch" "$steps")
    read -r k2 wait ar <<<"$(kiln_run 2 "$model" "$data" "$batch" "$steps")"
    t2=$(torch_run 2 "$model" "$data" "$batch" "$steps")
    kc=$(kiln_pair "$model" "$data" "$batch" "$steps")
    oc=$(awk -v a="$kc" -v b="$k2" 'BEGIN { printf "%.2f", b / a }')
    ke=$(awk -v a="$k1" -v b="$k2" 'BEGIN { printf "%.2f", b / (2 * a) }')
    te=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", b / (2 * a) }')
    printf "%-22s %-5s %12s %12s %12s %12s %12s %9s %9s %8s %16s\n" "$model ($data)" "$batch" "$k1" "$k2" "$kc" "$t1" \
      "$t2" "$ke" "$te" "$oc" "$wait / $ar"
  done
done
echo "images/s: global training images per second (2 ranks: both ranks' images); eff: 2-rank / (2 x 1-rank);"
echo "kiln_2x1: two independent 1-rank runs at once, summed (the ceiling); of_ceil: kiln_2 / kiln_2x1;"
echo "kiln_comm_ms: per step of the 2-rank run, not hidden by backward / all-reduce in all"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(getconf _NPROCESSORS_ONLN) cores"
