#!/bin/bash
# The CPU-speed table of issue 35 (and of docs/cpu-profile.md and the README), kiln against its PyTorch
# peers in the same run on this machine. Timing only: no assertions, never a test.
#
# ResNet18 train step (forward, cross-entropy, backward, SGD momentum) at 8x224 and 32x64, per thread
# count, these rows (layout in brackets):
#   torch 1.13 f32 [nchw]                  Debian's /usr/bin/python3        } one bench_train_step run
#   kiln f32 [nchw]                                                        }   (kiln then its peer)
#   torch 2.x f32 [nchw]                   the venv of bench/torch_venv.sh, bench/peers/train_step_torch.py
#   kiln f32 [channels_last]               bench_train_step --channels-last } one run
#   torch 2.x f32 [channels_last]                                           }
#   kiln bf16 [nchw]                       bench_train_step --amp bf16      } one run
#   torch 2.x autocast bf16 [channels_last]                                 }
# Each row's number of one run is the median of STEPS steps after WARMUP; RUNS runs, the rows
# alternating within a run (the order reversed every other run, so drift falls on both sides); the table
# gives each row's median over the runs and its spread (min-max), then kiln bf16 / torch 2.x bf16 (median
# of the per-run ratios, same bench_train_step run; goal <= 0.9) and kiln f32 / torch 2.x's faster f32
# layout (kiln's default NCHW f32 over the faster of torch 2.x's two f32 rows; ratio of the medians; goal <= 0.9).
# Small CNN on Fashion-MNIST (SGD 0.05 momentum 0.9, 6400 images, 1 epoch, evaluation excluded from
# images/s), in memory (IDX) and from the main job's JPEG folder (decoded every epoch, 1 loader worker):
# kiln f32 against torch 1.13 f32 (as before), and kiln train --amp bf16 against torch 2.x bf16 (autocast,
# channels_last); kiln and the peer alternate; the median of kiln time / torch time (goal <= 0.8).
# Every row names the CPU model and its bf16 ISA (lscpu; /proc/cpuinfo flags avx512_bf16, amx_bf16).
#
#   bench/cpu_table.sh [RUNS=5] [THREADS="1 2"] [BATCHES="16 64 128"]
# Environment: KILN_BUILD (build folder with kiln and bench_train_step; default build), STEPS (5), WARMUP
# (1), SECTIONS ("resnet small"), SHAPES ("8x224 32x64": ResNet18's BATCHxSIZE), KILN_TORCH2_PYTHON (default: the venv's python when bench/torch_venv.sh
# --check finds it), KILN_BF16_CHANNELS_LAST=1 (kiln's bf16 rows in channels_last too).
# Without the torch 2.x venv the torch 2.x rows say "skipped" and the rest runs. Progress goes to stdout
# as it runs; save it with `| tee bench/results/cpu_table_$(date -u +%F)_NAME.txt`.
# Needs a Release build with the benches (scripts/setup.sh --test builds one) and /usr/bin/python3 with torch.
set -euo pipefail
exec 2>&1  # progress and failures in one stream (tee it)
cd "$(dirname "$0")/.."
RUNS=${1:-5}
THREADS=${2:-"1 2"}
BATCHES=${3:-"16 64 128"}
BUILD=${KILN_BUILD:-build}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-1}
SECTIONS=${SECTIONS:-"resnet small"}
SHAPES=${SHAPES:-"8x224 32x64"}
DATA=/usr/share/datasets/fashion-mnist
JPEG=${KILN_FMNIST_JPEG:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/fashion-mnist-jpeg}
for f in "$BUILD/kiln" "$BUILD/bench_train_step"; do
  [ -x "$f" ] || { echo "cpu_table: $f is missing (build with scripts/setup.sh --test first, or set KILN_BUILD)" >&2; exit 1; }
done
# Every process of the table (kiln's programs, both peers) runs with kiln's OpenMP policy (kernels/cpu/threads.h:
# passive, a short spin; one OpenBLAS thread), the one bench_train_step and the small-CNN peer set anyway.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-3000}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

T1=/usr/bin/python3
T1V=$($T1 -c 'import torch; print(torch.__version__)' 2>/dev/null) || T1V=""
T2=${KILN_TORCH2_PYTHON:-$(bench/torch_venv.sh --check 2>/dev/null || true)}
T2V=""
[ -n "$T2" ] && { T2V=$("$T2" -c 'import torch; print(torch.__version__)' 2>/dev/null) || T2V=""; }
NO_T2="skipped: no torch 2.x venv (bench/torch_venv.sh)"
FLAGS=" $(grep -m1 '^flags' /proc/cpuinfo) "
has_flag() { if [[ $FLAGS == *" $1 "* ]]; then echo "$1"; else echo "no $1"; fi; }
CPU="$(lscpu | sed -n 's/^Model name: *//p'), $(has_flag avx512f), $(has_flag avx512_bf16), $(has_flag amx_bf16)"
KBF16_FLAGS="--amp bf16"
KBF16_LAYOUT=nchw
if [ "${KILN_BF16_CHANNELS_LAST:-0}" = 1 ]; then KBF16_FLAGS+=" --channels-last"; KBF16_LAYOUT=channels_last; fi

median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
spread() { sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {if (NR == 0) print "n/a"; else printf "%s-%s", lo, hi}'; }
f1() { awk '{if ($1 ~ /^[0-9.]+$/) printf "%.1f\n", $1; else print}'; }  # ms with one decimal
f2() { awk '{if ($1 ~ /^[0-9.]+$/) printf "%.2f\n", $1; else print}'; }  # ratios with two
nums() { tr ' ' '\n' | grep -E '^[0-9.]+$' || true; }  # the numbers of a list (drops n/a and failures)

echo "cpu_table: $CPU; $(nproc) cores; $RUNS runs; threads $THREADS; $(date -u '+%F %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu_table: torch 1.13 peer: $T1 (torch ${T1V:-missing}); torch 2.x peer: ${T2:-none} (torch ${T2V:-$NO_T2})"
echo "cpu_table: kiln: $BUILD ($(git log -1 --format='%h, %cs' 2>/dev/null)); OMP_WAIT_POLICY=$OMP_WAIT_POLICY GOMP_SPINCOUNT=$GOMP_SPINCOUNT"

# bench_train_step for one shape: prints "KILN_MS TORCH_MS" (n/a where a side did not run; "fail" when the
# program failed: its error line goes to stdout as progress).
bts() {  # $1 threads, $2 batch, $3 size, $4... bench_train_step flags
  local t=$1 b=$2 s=$3 out row
  shift 3
  if ! out=$("$BUILD/bench_train_step" --threads "$t" --batch "$b" --image-size "$s" --steps "$STEPS" \
               --warmup "$WARMUP" "$@" 2>&1); then
    echo "    bench_train_step $* failed: $(grep -m1 'error' <<< "$out" || tail -1 <<< "$out")" >&2
    echo "fail fail"
    return
  fi
  grep -m1 '^peer: torch column n/a' <<< "$out" | sed 's/^/    /' >&2 || true
  row=$(grep -m1 -E "^${b}x${s} " <<< "$out" || true)
  if [ -z "$row" ]; then echo "    bench_train_step $* printed no ${b}x${s} row" >&2; echo "fail fail"; return; fi
  awk '{print $2, $3}' <<< "$row"
}
# The torch peer alone (the torch 2.x f32 NCHW row): its median ms, or fail.
peer_ms() {  # $1 python, $2 mode, $3 threads, $4 batch, $5 size
  "$1" bench/peers/train_step_torch.py --mode "$2" --threads "$3" --batch "$4" --size "$5" --steps "$STEPS" \
      --warmup "$WARMUP" 2>/dev/null | sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p' | awk '{printf "%.1f\n", $1}' |
    grep . || echo fail
}

if [[ " $SECTIONS " == *" resnet "* ]]; then
  echo "== ResNet18 train step: ${BUILD}/bench_train_step --steps $STEPS --warmup $WARMUP, each row's median ms per run"
  declare -A V=()      # "shape|threads|row" -> the per-run medians
  declare -A RATIO=()  # "shape|threads" -> per-run kiln bf16 / torch 2.x bf16
  declare -A RATIO13=()  # "shape|threads" -> per-run kiln f32 / torch 1.13 f32 (the table's old number)
  ROWS=("torch $T1V f32|nchw" "kiln f32|nchw" "torch 2.x f32|nchw" "kiln f32|channels_last"
        "torch 2.x f32|channels_last" "kiln bf16|$KBF16_LAYOUT" "torch 2.x autocast bf16|channels_last")
  for t in $THREADS; do
    for shape in $SHAPES; do
      b=${shape%x*} s=${shape#*x}
      for r in $(seq "$RUNS"); do
        groups=(a b c d)
        [ $((r % 2)) = 0 ] && groups=(d c b a)
        for g in "${groups[@]}"; do
          case $g in
            a) read -r k p < <(bts "$t" "$b" "$s" --peer-python "$T1" --peer-mode f32)
               V["$shape|$t|kiln f32|nchw"]+="$k "; V["$shape|$t|torch $T1V f32|nchw"]+="$p "
               [[ $k =~ ^[0-9.]+$ && $p =~ ^[0-9.]+$ ]] && RATIO13["$shape|$t"]+="$(awk -v a="$k" -v b="$p" 'BEGIN {printf "%.3f", a / b}') "
               echo "  [$shape ${t}t run $r/$RUNS] kiln f32 $k ms, torch ${T1V:-1.13} f32 $p ms" ;;
            b) if [ -n "$T2" ]; then p=$(peer_ms "$T2" f32 "$t" "$b" "$s"); else p=skipped; fi
               V["$shape|$t|torch 2.x f32|nchw"]+="$p "
               echo "  [$shape ${t}t run $r/$RUNS] torch ${T2V:-2.x} f32 $p ms" ;;
            c) if [ -n "$T2" ]; then read -r k p < <(bts "$t" "$b" "$s" --channels-last --peer-python "$T2" --peer-mode channels_last)
               else read -r k p < <(bts "$t" "$b" "$s" --channels-last --no-peer); p=skipped; fi
               V["$shape|$t|kiln f32|channels_last"]+="$k "; V["$shape|$t|torch 2.x f32|channels_last"]+="$p "
               echo "  [$shape ${t}t run $r/$RUNS] kiln f32 channels_last $k ms, torch ${T2V:-2.x} f32 channels_last $p ms" ;;
            d) # shellcheck disable=SC2086
               if [ -n "$T2" ]; then read -r k p < <(bts "$t" "$b" "$s" $KBF16_FLAGS --peer-python "$T2" --peer-mode bf16)
               else read -r k p < <(bts "$t" "$b" "$s" $KBF16_FLAGS --no-peer); p=skipped; fi
               V["$shape|$t|kiln bf16|$KBF16_LAYOUT"]+="$k "; V["$shape|$t|torch 2.x autocast bf16|channels_last"]+="$p "
               [[ $k =~ ^[0-9.]+$ && $p =~ ^[0-9.]+$ ]] && RATIO["$shape|$t"]+="$(awk -v a="$k" -v b="$p" 'BEGIN {printf "%.3f", a / b}') "
               echo "  [$shape ${t}t run $r/$RUNS] kiln bf16 ($KBF16_LAYOUT) $k ms, torch ${T2V:-2.x} autocast bf16 (channels_last) $p ms" ;;
          esac
        done
      done
    done
  done
  echo
  echo "ResNet18 train step, $RUNS runs of $STEPS steps each; torch 2.x = ${T2V:-none}; CPU: $CPU;" \
       "$(date -u '+%H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "| shape, threads | row | layout | median ms | spread (min-max) | CPU, ISA |"
  echo "|---|---|---|---|---|---|"
  for t in $THREADS; do
    for shape in $SHAPES; do
      for row in "${ROWS[@]}"; do
        name=${row%|*} layout=${row#*|}
        vals=${V["$shape|$t|$name|$layout"]:-}
        if [[ $name == "torch 2.x"* && -z $T2 ]]; then m="$NO_T2" sp=""
        else m=$(nums <<< "$vals" | median | f1); sp=$(nums <<< "$vals" | spread)
             [ "$m" = n/a ] && m="failed ($vals)"; fi
        echo "| $shape, $t | ${name/2.x/${T2V:-2.x}} | $layout | $m | $sp | $CPU |"
      done
    done
  done
  echo
  for t in $THREADS; do
    for shape in $SHAPES; do
      bf=$(nums <<< "${RATIO["$shape|$t"]:-}" | median | f2)
      r13=$(nums <<< "${RATIO13["$shape|$t"]:-}" | median | f2)
      kf=$(nums <<< "${V["$shape|$t|kiln f32|nchw"]}" | median)
      tf=$(nums <<< "${V["$shape|$t|torch 2.x f32|nchw"]}" | median)
      tc=$(nums <<< "${V["$shape|$t|torch 2.x f32|channels_last"]}" | median)
      f32=$(awk -v k="$kf" -v tf="$tf" -v tc="$tc" 'BEGIN {
        t = tf; tl = "nchw"; if (tc != "n/a" && (t == "n/a" || tc + 0 < t + 0)) { t = tc; tl = "channels_last" }
        if (k == "n/a" || t == "n/a") print "n/a"; else printf "%.2f (kiln nchw %.1f ms / torch %s %.1f ms)", k / t, k, tl, t }')
      echo "ResNet18 $shape ${t} thread(s): kiln bf16 / torch ${T2V:-2.x} bf16 = ${bf} (median of per-run ratios; goal <= 0.9);" \
           "kiln f32 (nchw) / torch's faster f32 layout = $f32 (goal <= 0.9); kiln f32 / torch ${T1V:-1.13} f32 = $r13" \
           "(median of per-run ratios)"
    done
  done
fi

# One small-CNN row: kiln train and the peer on the same data, alternating; prints the median time ratio.
small_cnn() {  # $1 label, $2 data, $3 threads, $4 batch, $5 kiln precision f32|bf16, $6 peer python, $7 peer mode, $8... extra kiln flags
  local label=$1 data=$2 t=$3 b=$4 prec=$5 py=$6 pmode=$7
  shift 7
  local amp=() rs="" ks="" ps="" r k p t0 t1 t2 pv kd pd kmiss=failed
  [ "$prec" = bf16 ] && [ "$KILN_BF16" = 0 ] && kmiss="skipped (this kiln has no 'kiln train --amp bf16')"
  [ "$prec" = bf16 ] && amp=(--amp bf16)
  pv=$([ "$py" = "$T1" ] && echo "${T1V:-1.13}" || echo "${T2V:-2.x}")
  for r in $(seq "$RUNS"); do
    t0=$(date +%s.%N)
    k=""
    [ "$prec" = bf16 ] && [ "$KILN_BF16" = 0 ] || k=$("$BUILD/kiln" train --model small_cnn --data "$data" "$@" "${amp[@]}" --limit 6400 --epochs 1 --batch "$b" \
          --threads "$t" --optimizer sgd --lr 0.05 --momentum 0.9 2>&1 | sed -n 's/.*train loss.* \([0-9.]*\) img\/s.*/\1/p' |
        tail -1 || true)
    t1=$(date +%s.%N)
    p=$("$py" bench/peers/train_small_cnn_torch.py --data "$data" --epochs 1 --batch "$b" --threads "$t" \
          --limit 6400 --workers 1 --mode "$pmode" 2>/dev/null | sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p' || true)
    t2=$(date +%s.%N)
    kd=$kmiss pd=failed
    [ -n "$k" ] && kd="$k img/s"
    [ -n "$p" ] && pd="$p img/s"
    echo "  $label $t thread(s) batch $b run $r: kiln $prec $kd ($(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s wall)," \
         "torch $pv $pmode $pd ($(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.1f", b - a}') s wall; wall includes start-up and evaluation)"
    [ -n "$k" ] && ks+="$k "
    [ -n "$p" ] && ps+="$p "
    [ -n "$k" ] && [ -n "$p" ] && rs+="$(awk -v k="$k" -v p="$p" 'BEGIN {printf "%.3f", p / k}') "
  done
  echo "small CNN $label, $t thread(s), batch $b: kiln $prec $(nums <<< "$ks" | median) img/s ($(nums <<< "$ks" | spread))," \
       "torch $pv $pmode $(nums <<< "$ps" | median) img/s ($(nums <<< "$ps" | spread)); median kiln/torch time" \
       "$(nums <<< "$rs" | median) (goal <= 0.8); CPU: $CPU"
}

if [[ " $SECTIONS " == *" small "* ]]; then
  [ -d "$JPEG/train" ] || "$BUILD/kiln" export-images --data "$DATA" --out "$JPEG" --quality 95 >/dev/null
  # kiln train --amp bf16 comes with issue 35 (branch amp-bf16); a kiln without it: its side says "skipped",
  # the torch 2.x bf16 peer still runs.
  KILN_BF16=0
  help=$("$BUILD/kiln" train --help 2>/dev/null || true)
  [[ $(grep -- '--amp' <<< "$help" || true) == *bf16* ]] && KILN_BF16=1
  for src in memory jpeg; do
    if [ $src = memory ]; then d=$DATA extra=()
      echo "== small CNN, Fashion-MNIST in memory (IDX): kiln train vs bench/peers/train_small_cnn_torch.py"
    else d=$JPEG extra=(--channels 1 --normalize auto --workers 1)
      echo "== small CNN, the main job's JPEG folder ($JPEG), 1 loader worker each"
    fi
    for t in $THREADS; do
      for b in $BATCHES; do
        small_cnn "$src" "$d" "$t" "$b" f32 "$T1" f32 "${extra[@]}"
        if [ -z "$T2" ]; then echo "small CNN $src, $t thread(s), batch $b: kiln bf16 vs torch 2.x bf16: $NO_T2"
        else small_cnn "$src" "$d" "$t" "$b" bf16 "$T2" bf16 "${extra[@]}"; fi
      done
    done
  done
fi
