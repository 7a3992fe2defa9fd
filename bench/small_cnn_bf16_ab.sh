#!/bin/bash
# small_cnn_bf16_ab.sh: the small CNN's `kiln train --amp bf16` of two kiln builds (A: another build, e.g. main's;
# B: this one) beside this build's f32 and PyTorch 2.x's autocast bf16 peer (bench/peers/train_small_cnn_torch.py
# --mode bf16, the bench/torch_venv.sh venv), Fashion-MNIST in memory, 6400 images, 1 epoch, 1 thread, SGD as
# bench/cpu_table.sh's small rows; the order of the four reverses every other run. Prints images/s per side per
# run (time ratios: divide). Measurement only.
#   KILN_A=OTHER_CHECKOUT/build/kiln [KILN_B=build/kiln] [RUNS=4] [BATCHES="16 128"] bench/small_cnn_bf16_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-3000} OPENBLAS_NUM_THREADS=1
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
PY=${KILN_TORCH2_PYTHON:-$(bench/torch_venv.sh --check 2>/dev/null || true)}
A=${KILN_A:?set KILN_A to the other build\'s kiln binary}
B=${KILN_B:-build/kiln}
kiln_run() {  # $1 binary, $2 batch, $3... extra flags
  local bin=$1 b=$2
  shift 2
  "$bin" train --model small_cnn --data "$DATA" "$@" --limit 6400 --epochs 1 --batch "$b" --threads 1 --optimizer sgd \
    --lr 0.05 --momentum 0.9 2>&1 | sed -n 's/.*train loss.* \([0-9.]*\) img\/s.*/\1/p' | tail -1
}
torch_run() {
  [ -n "$PY" ] || { echo skipped; return; }
  "$PY" bench/peers/train_small_cnn_torch.py --data "$DATA" --epochs 1 --batch "$1" --threads 1 --limit 6400 \
    --workers 1 --mode bf16 2>/dev/null | sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p'
}
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); A $A, B $B"
for r in $(seq "${RUNS:-4}"); do
  for b in ${BATCHES:-16 128}; do
    order="a_bf16 b_bf16 torch_bf16 b_f32"
    [ $((r % 2)) = 0 ] && order="b_f32 torch_bf16 b_bf16 a_bf16"
    line="run $r batch $b load $(cut -d' ' -f1 /proc/loadavg):"
    for w in $order; do
      case $w in
        a_bf16) v=$(kiln_run "$A" "$b" --amp bf16) ;;
        b_bf16) v=$(kiln_run "$B" "$b" --amp bf16) ;;
        b_f32) v=$(kiln_run "$B" "$b") ;;
        torch_bf16) v=$(torch_run "$b") ;;
      esac
      line+=" $w ${v:-failed}"
    done
    echo "$line"
  done
done
