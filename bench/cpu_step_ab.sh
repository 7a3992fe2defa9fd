#!/bin/bash
# CPU time (user + sys) per training step of two bench_train_step binaries, alternating, for a machine shared
# with other work (wall-clock steps swing with the load; CPU time far less): per binary, shape and round,
# (the process with --steps 11) - (the same with --steps 1), / 10, with the 1-minute load average at its start.
# The order of the two binaries is reversed every other round.
#   bench/cpu_step_ab.sh THREADS ROUNDS BIN_A BIN_B [AMP]     (AMP: bf16 (default), f16 or none)
# e.g. bench/cpu_step_ab.sh 1 3 /tmp/main/bench_train_step build/bench_train_step
# Prints "round R SHAPE BIN ms_cpu_per_step load L" lines; BIN is the binary's folder name (+ its flags).
# Optional environment: AB_FLAGS_A / AB_FLAGS_B extra flags of each binary (e.g. AB_FLAGS_B=--channels-last:
# the same binary twice, NCHW against channels-last batches), AB_SHAPES the shapes ("8 224,32 64").
set -eu
T=$1; R=$2; A=$3; B=$4; AMP=${5:-bf16}
amp_flag=(--amp "$AMP"); [ "$AMP" = none ] && amp_flag=()
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
FA=${AB_FLAGS_A:-}; FB=${AB_FLAGS_B:-}; SHAPES=${AB_SHAPES:-8 224,32 64}
cpu_s() {  # BIN FLAGS BATCH SIZE STEPS -> user+sys seconds
  local bin=$1 flags=$2; shift 2
  # shellcheck disable=SC2086
  /usr/bin/time -f "%U %S" -o "$tmp" "$bin" $flags "${amp_flag[@]}" --no-peer --threads "$T" --batch "$1" --image-size "$2" \
    --steps "$3" --warmup 1 >/dev/null 2>&1
  awk '{print $1 + $2}' "$tmp"
}
for r in $(seq 1 "$R"); do
  IFS=, read -ra shapes <<< "$SHAPES"
  for shape in "${shapes[@]}"; do
    set -- $shape
    if [ $((r % 2)) -eq 1 ]; then order=(A B); else order=(B A); fi
    for which in "${order[@]}"; do
      if [ "$which" = A ]; then bin=$A; flags=$FA; else bin=$B; flags=$FB; fi
      load=$(cut -d' ' -f1 /proc/loadavg)
      c11=$(cpu_s "$bin" "$flags" "$1" "$2" 11); c1=$(cpu_s "$bin" "$flags" "$1" "$2" 1)
      echo "round $r ${1}x${2} $(basename "$(dirname "$bin")")${flags:+ $flags} $(awk -v a="$c11" -v b="$c1" 'BEGIN {printf "%.1f", (a - b) * 100}') load $load"
    done
  done
done
