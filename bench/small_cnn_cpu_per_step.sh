#!/bin/bash
# small_cnn_cpu_per_step.sh: the small CNN's `kiln train --amp bf16` CPU milliseconds per training step, of two kiln
# builds (A: another build, e.g. main's; B: this one) beside PyTorch 2.x's autocast bf16 peer, when the machine is
# shared and wall-clock img/s is noise. kiln: (user+sys of a 6400-image run - user+sys of a one-step run of the
# same command) / (steps - 1): both pay the same start-up, data reading and evaluation. torch: the same difference
# of the peer's train_cpu_s (its CPU seconds over its training loop; python's start-up varies by seconds under
# load). Fashion-MNIST in memory, 1 epoch, SGD as bench/cpu_table.sh's small rows; the order of the three reverses
# every other run. CPU time still grows with a busy sibling hyperthread: compare within a run. Measurement only.
# Since channels-last became --amp bf16's CPU default, a build from before it runs NCHW where a newer one runs
# NHWC: KILN_TRAIN_FLAGS=--channels-last (both builds know it) compares like with like.
#   KILN_A=OTHER_CHECKOUT/build/kiln [KILN_B=build/kiln] bench/small_cnn_cpu_per_step.sh [RUNS=4] [BATCH=128] [THREADS=1]
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-3000} OPENBLAS_NUM_THREADS=1
RUNS=${1:-4} B=${2:-128} TH=${3:-1}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
PY=${KILN_TORCH2_PYTHON:-$(bench/torch_venv.sh --check 2>/dev/null || true)}
A=${KILN_A:?set KILN_A to the other build\'s kiln binary}
KB=${KILN_B:-build/kiln}
T=$(mktemp)
trap 'rm -f "$T"' EXIT
kiln_cpu() {  # $1 binary, $2 images: user+sys seconds
  /usr/bin/time -f "%U %S" -o "$T" "$1" train --model small_cnn --data "$DATA" --amp bf16 --limit "$2" --epochs 1 \
    --batch "$B" --threads "$TH" --optimizer sgd --lr 0.05 --momentum 0.9 ${KILN_TRAIN_FLAGS:-} > /dev/null 2>&1
  awk '{printf "%.3f", $1 + $2}' "$T"
}
torch_cpu() {  # $1 images: the peer's train_cpu_s
  [ -n "$PY" ] || { echo 0; return; }
  "$PY" bench/peers/train_small_cnn_torch.py --data "$DATA" --epochs 1 --batch "$B" --threads "$TH" --limit "$1" \
    --workers 1 --mode bf16 2>/dev/null | sed -n 's/.*"train_cpu_s": \([0-9.]*\).*/\1/p'
}
steps=$((6400 / B))
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); A $A, B $KB; batch $B, $TH thread(s); torch ${PY:-none}"
for r in $(seq "$RUNS"); do
  order="a b torch"
  [ $((r % 2)) = 0 ] && order="torch b a"
  line="run $r load $(cut -d' ' -f1 /proc/loadavg):"
  for w in $order; do
    case $w in
      a) f=$(kiln_cpu "$A" 6400); s=$(kiln_cpu "$A" "$B") ;;
      b) f=$(kiln_cpu "$KB" 6400); s=$(kiln_cpu "$KB" "$B") ;;
      torch) f=$(torch_cpu 6400); s=$(torch_cpu "$B") ;;
    esac
    line+=" $w $(awk -v f="$f" -v s="$s" -v n="$steps" 'BEGIN {printf "%.2f", 1000 * (f - s) / (n - 1)}') ms/step;"
  done
  echo "$line"
done
