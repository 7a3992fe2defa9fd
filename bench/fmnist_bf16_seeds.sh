#!/usr/bin/env bash
# Accuracy benchmark (not a test): the small CNN on Fashion-MNIST trained in f32 and with --amp bf16 over the
# same seeds, same epochs and hyper-parameters, one run after the other. Prints each run's final validation
# accuracy, then per precision the mean, the spread (min..max) and the sample standard deviation, and the
# paired bf16 - f32 difference per seed. The aim (issue 35): no loss of accuracy from bf16.
# Usage: [EPOCHS=2] bench/fmnist_bf16_seeds.sh [BUILD_DIR] [THREADS] [SEEDS] [extra args for every run, e.g. --limit 6000]
#   SEEDS: a quoted list, default "1 2 3".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
T=${2:-1}
SEEDS=${3:-"1 2 3"}
shift $(( $# > 3 ? 3 : $# ))
DATA=/usr/share/datasets/fashion-mnist
[ -d "$DATA" ] || { echo "fmnist_bf16_seeds: $DATA missing (scripts/setup.sh installs it)" >&2; exit 1; }
HP=(--epochs "${EPOCHS:-2}" --batch 16 --optimizer adamw --lr 1e-3 --weight-decay 5e-4 --schedule cosine --threads "$T")
echo "# small CNN, Fashion-MNIST (60000 train / 10000 val), ${HP[*]} $*"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $("$BUILD/kiln" devices 2>/dev/null | grep -m1 -i 'bf16' || true)"
declare -A ACC
for seed in $SEEDS; do
  for prec in f32 bf16; do
    amp=(); [ "$prec" = bf16 ] && amp=(--amp bf16)
    out=$(mktemp -d)
    start=$(date +%s)
    line=$("$BUILD/kiln" train --model small_cnn --data "$DATA" "${HP[@]}" "${amp[@]}" --seed "$seed" "$@" \
             --out "$out" | grep -E "^epoch .* val" | tail -1)
    rm -rf "$out"
    acc=$(sed -E 's/.*val loss [0-9.]+ acc ([0-9.]+)%.*/\1/' <<<"$line")
    ACC[$prec,$seed]=$acc
    printf "seed %s  %-4s  val acc %s%%  (%d s)\n" "$seed" "$prec" "$acc" $(( $(date +%s) - start ))
  done
done
for prec in f32 bf16; do
  vals=""; for seed in $SEEDS; do vals+="${ACC[$prec,$seed]} "; done
  awk -v p="$prec" -v v="$vals" 'BEGIN { n = split(v, a, " "); s = 0; mn = 1e9; mx = -1e9
    for (i = 1; i <= n; i++) { s += a[i]; if (a[i] < mn) mn = a[i]; if (a[i] > mx) mx = a[i] }
    m = s / n; q = 0; for (i = 1; i <= n; i++) q += (a[i] - m) ^ 2
    printf "%-4s  mean %.2f%%  min %.2f  max %.2f  sd %.2f  (n=%d)\n", p, m, mn, mx, (n > 1 ? sqrt(q / (n - 1)) : 0), n }'
done
d=""; for seed in $SEEDS; do d+="$(awk -v a="${ACC[bf16,$seed]}" -v b="${ACC[f32,$seed]}" 'BEGIN{printf "%+.2f", a-b}') "; done
echo "bf16 - f32 per seed (points): $d"
