#!/usr/bin/env bash
# Regenerates every number of docs/memory-rules-of-thumb.md: prints each command, then the lines of
# its output the page quotes (and the arithmetic the page does on them). Memory figures are kiln's
# meta-device predictions (no GPU ever ran kiln) or the CPU allocator's; times are this CPU's.
# Usage: scripts/memory_rules.sh [BUILD_DIR] [SECTION ...]
#   sections: params resnet linear size amp recompute maxbatch emptycache card stages relu accum reset
#   (default: all; `recompute` and `reset` train for real and take minutes on 2 cores)
# Needs BUILD_DIR/kiln, BUILD_DIR/bench_train_step, BUILD_DIR/rules_* and, for `accum`,
# BUILD_DIR/kiln_tests_unit; /usr/bin/python3 for the arithmetic and the SVG picture.
set -euo pipefail
BUILD=${1:-build}
shift || true
BUILD=$(cd "$BUILD" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=$BUILD/kiln
[ -x "$KILN" ] || { echo "memory_rules: $KILN not built (cmake --build $BUILD --target kiln_cli)" >&2; exit 2; }
SECTIONS=${*:-params resnet linear size amp recompute maxbatch emptycache card stages relu accum reset}
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
R18="--model resnet18 --image-size 224 --num-classes 1000"

exec 2>&1  # run's echo goes to stderr so that `run CMD | filter` still shows the command first
run() {  # prints the command as a reader would type it (build/ for the build folder), then runs it
  echo "\$ ${*/#$BUILD/build}" >&2
  "$@"
}
hide_layers() { grep -v -E '^  (\(top level\)|conv1|bn1|maxpool|layer[0-9]|avgpool) ' || true; }
json() {  # json FILE EXPR: evaluates EXPR with d = the JSON document
  "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
mem_json() {  # mem_json OUT ARGS...: kiln mem ARGS --json into OUT, the command echoed
  local out=$1
  shift
  echo "\$ build/kiln mem $* --json" >&2
  "$KILN" mem "$@" --json > "$out"
}

section() { printf '\n==== %s\n' "$1"; }

for s in $SECTIONS; do
  case $s in
  params)
    section "params: parameters + gradients + optimizer state per parameter (ResNet18, 1000 classes)"
    run "$KILN" model show resnet18 --num-classes 1000 --image-size 224 | tail -1
    for opt in "--optimizer adamw" "--optimizer sgd --momentum 0.9" "--optimizer sgd"; do
      # shellcheck disable=SC2086
      mem_json "$TMP/p.json" $R18 --batch 64 $opt
      json "$TMP/p.json" "'params %d B, grads %d B, optimizer state %d B; (params + grads + state) / 11689512 = %.3f B per parameter; at the peak: grads %d B, optimizer %d B, activations %d B of peak allocated %d B' % (d['parameters'], d['gradients'], d['optimizer_state'], (d['parameters']+d['gradients']+d['optimizer_state'])/11689512, d['steady_step']['tags_at_peak']['grad'], d['steady_step']['tags_at_peak']['optimizer'], d['steady_step']['tags_at_peak']['activation'], d['peak_allocated'])"
    done
    ;;
  resnet)
    section "resnet: ResNet18, batch 64, 224 px, SGD, per-tag and per-layer"
    run "$KILN" mem $R18 --batch 64 | sed -n 1,10p
    "$KILN" mem $R18 --batch 64 | grep -E '^  (conv1|bn1|maxpool|layer1.0.conv1|layer4.1.bn2|avgpool) '
    # Every layer's output counted once (what a hand count of "the activations" adds up).
    run "$KILN" model show resnet18 --num-classes 1000 --image-size 224 > "$TMP/show.txt"
    "$PY" -c "
import re
tot = n = 0
by_type = {}
for line in open('$TMP/show.txt'):
    m = re.search(r'\(([0-9, ]+)\)', line)
    if not m or line.startswith('model'): continue
    p = 1
    for v in m.group(1).split(','):
        if v.strip(): p *= int(v)
    tot += p; n += 1
    by_type[line.split()[1]] = by_type.get(line.split()[1], 0) + p * 64 * 4
print('%d layers, every output once at batch 64, f32: %d B = %.2f GiB; by type (MiB): %s' % (n, tot * 64 * 4,
      tot * 64 * 4 / 2**30, ', '.join('%s %.1f' % (k, v / 2**20) for k, v in by_type.items())))"
    ;;
  linear)
    section "linear: peak allocated / reserved against the batch (ResNet18 224 px, SGD)"
    for target in "cpu" "cuda:0" "cuda:0 (KILN_CUDA_VMM=0: cudaMalloc segments)"; do
      echo "-- target $target"
      dev=${target%% *}
      vmm=1
      [[ $target == *VMM=0* ]] && vmm=0
      prev_b=0 prev_a=0
      for b in 1 2 4 8 16 32 48 64 96 128 192 256; do
        KILN_CUDA_VMM=$vmm "$KILN" mem $R18 --batch "$b" --device "$dev" --device-memory 80G --json > "$TMP/l.json"
        a=$(json "$TMP/l.json" "d['peak_allocated']")
        r=$(json "$TMP/l.json" "d['peak_reserved']")
        slope=""
        [ "$prev_b" -gt 0 ] && slope=$("$PY" -c "print('%.2f MiB/sample' % (($a-$prev_a)/($b-$prev_b)/2**20))")
        "$PY" -c "print('batch %4d: allocated %9.1f MiB  reserved %9.1f MiB  reserved-allocated %6.1f MiB  %s' % ($b, $a/2**20, $r/2**20, ($r-$a)/2**20, '$slope'))"
        prev_b=$b prev_a=$a
      done
    done
    echo "(each line: KILN_CUDA_VMM=V build/kiln mem $R18 --batch B --device D --device-memory 80G --json)"
    ;;
  size)
    section "size: activations at 160 px against 224 px (ResNet18, batch 64)"
    mem_json "$TMP/a.json" $R18 --batch 64
    mem_json "$TMP/b.json" --model resnet18 --image-size 160 --num-classes 1000 --batch 64
    "$PY" -c "
import json
a=json.load(open('$TMP/a.json')); b=json.load(open('$TMP/b.json'))
print('activations %d B at 224, %d B at 160: ratio %.4f ((160/224)^2 = %.4f); peak allocated ratio %.4f, peak reserved ratio %.4f' % (a['activations'], b['activations'], b['activations']/a['activations'], (160/224)**2, b['peak_allocated']/a['peak_allocated'], b['peak_reserved']/a['peak_reserved']))"
    ;;
  amp)
    section "amp: --amp against f32 (ResNet18 224 px batch 64, AdamW)"
    mem_json "$TMP/f.json" $R18 --batch 64 --optimizer adamw
    mem_json "$TMP/h.json" $R18 --batch 64 --optimizer adamw --amp
    "$PY" -c "
import json
f=json.load(open('$TMP/f.json')); h=json.load(open('$TMP/h.json'))
tp=lambda d: d['steady_step']['tag_peak']
for k in ['param','param_f16','grad','optimizer','activation','temporary','data']:
    print('%-10s f32 %12d B   amp %12d B   amp/f32 %s' % (k, tp(f)[k], tp(h)[k], '%.3f' % (tp(h)[k]/tp(f)[k]) if tp(f)[k] else '-'))
print('activations (end of forward) %d -> %d B (%.3f); peak allocated %d -> %d B (%.3f); peak reserved %d -> %d B (%.3f)' % (f['activations'], h['activations'], h['activations']/f['activations'], f['peak_allocated'], h['peak_allocated'], h['peak_allocated']/f['peak_allocated'], f['peak_reserved'], h['peak_reserved'], h['peak_reserved']/f['peak_reserved']))"
    ;;
  recompute)
    section "recompute: memory (kiln mem) and step time (bench_train_step, this CPU)"
    for n in 0 2 4 10; do
      mem_json "$TMP/r.json" $R18 --batch 64 --recompute "$n"
      json "$TMP/r.json" "'  recompute $n: activations %d B, peak allocated %d B, peak reserved %d B' % (d['activations'], d['peak_allocated'], d['peak_reserved'])"
    done
    # Step time: plain and recompute steps alternate in one process (same load); 3 runs each.
    for n in 4 10; do
      for r in 1 2 3; do
        run "$BUILD/bench_train_step" --threads 2 --batch 16 --image-size 112 --recompute "$n" --steps 8 --warmup 1 | tail -1
      done
    done
    ;;
  maxbatch)
    section "maxbatch: (capacity - model) / per-sample cost x 0.8 against kiln's search (8 GiB, f32 SGD, cpu policy)"
    run "$KILN" mem $R18 --batch 64 --max-batch --device-memory 8G | sed -n 1p
    mem_json "$TMP/m1.json" $R18 --batch 64
    mem_json "$TMP/m2.json" $R18 --batch 128
    "$PY" -c "
import json
a=json.load(open('$TMP/m1.json')); b=json.load(open('$TMP/m2.json'))
slope=(b['peak_reserved']-a['peak_reserved'])/64; fixed=a['peak_reserved']-64*slope
model=a['parameters']+a['gradients']+a['optimizer_state']
cap=8*2**30
print('per-sample cost (reserved, batch 64 -> 128) %.2f MiB; fixed part (intercept) %.1f MiB; params+grads+state %.1f MiB' % (slope/2**20, fixed/2**20, model/2**20))
act=a['activations']/64
print('rule (cap - params+grads+state) / slope x 0.8 = %.1f; (0.8 cap - intercept) / slope = %.1f; with the activations alone as the per-sample cost (%.2f MiB): %.1f' % ((cap-model)/slope*0.8, (0.8*cap-fixed)/slope, act/2**20, (cap-model)/act*0.8))"
    ;;
  emptycache)
    section "emptycache: allocated and reserved around empty_cache() (CPU allocator)"
    run "$BUILD/rules_empty_cache"
    echo "\$ KILN_ALLOC_CONF=expandable=0 build/rules_empty_cache"
    KILN_ALLOC_CONF=expandable=0 "$BUILD/rules_empty_cache"
    ;;
  card)
    section "card: an 8 GB card, ResNet18 224 px, SGD momentum 0.9 (predicted for cuda:0)"
    for amp in "" "--amp"; do
      for b in 128 256; do
        # shellcheck disable=SC2086
        run "$KILN" mem $R18 --batch "$b" --momentum 0.9 --device cuda:0 --device-memory 8G $amp |
          grep -E '^  peak (allocated|reserved)|card memory needed|^budget' || true
      done
    done
    # shellcheck disable=SC2086
    run "$KILN" mem $R18 --batch 64 --momentum 0.9 --device cuda:0 --device-memory 8G --max-batch | sed -n 1p
    # shellcheck disable=SC2086
    run "$KILN" mem $R18 --batch 64 --momentum 0.9 --device cuda:0 --device-memory 8G --max-batch --amp | sed -n 1p
    ;;
  stages)
    section "stages: where ResNet18's activations are (batch 64, 224 px), by stage"
    mem_json "$TMP/s.json" $R18 --batch 64
    "$PY" -c "
import json, collections
d=json.load(open('$TMP/s.json'))
st=collections.OrderedDict(); n=collections.Counter()
for e in d['layer_activations']:
    m=e['module']; s=m.split('.')[0] if m.startswith('layer') else ('stem' if m in ('conv1','bn1','maxpool') else ('loss' if m=='(top level)' else 'head'))
    st[s]=st.get(s,0)+e['bytes']; n[s]+=1
tot=sum(st.values())
ch={'stem':64,'layer1':64,'layer2':128,'layer3':256,'layer4':512,'head':512,'loss':0}
for s,b in st.items():
    print('%-7s %4d channels, %2d layers: %8.2f MiB  %5.1f%%  (%.2f MiB per layer)' % (s, ch[s], n[s], b/2**20, 100*b/tot, b/2**20/n[s]))
print('total   %8.1f MiB' % (tot/2**20))"
    run "$KILN" model show resnet18 --num-classes 1000 --image-size 224 > "$TMP/show.txt"
    "$PY" -c "
import re
st = {}
for line in open('$TMP/show.txt'):
    f = line.split()
    if len(f) < 4 or not re.match(r'^[0-9,]+$', f[-3]): continue
    name = f[0]
    s = name.split('.')[0] if name.startswith('layer') else ('head' if name == 'fc' else 'stem')
    st[s] = st.get(s, 0) + int(f[-3].replace(',', ''))
print('parameters by stage: ' + ', '.join('%s %d' % kv for kv in st.items()) + '; total %d' % sum(st.values()))"
    ;;
  relu)
    section "relu: ReLU(inplace) in kiln (meta device, trainer's step)"
    run "$BUILD/rules_relu_inplace"
    ;;
  accum)
    section "accum: memory of --accum 4 at batch 64 against batch 64 and batch 16 (ResNet18 224 px, SGD)"
    for a in "--batch 64" "--batch 64 --accum 4" "--batch 16"; do
      # shellcheck disable=SC2086
      mem_json "$TMP/c.json" $R18 $a
      json "$TMP/c.json" "'  peak allocated %d B, peak reserved %d B, activations %d B; at the peak: data %d B, grad %d B, activation %d B' % (d['peak_allocated'], d['peak_reserved'], d['activations'], d['steady_step']['tags_at_peak']['data'], d['steady_step']['tags_at_peak']['grad'], d['steady_step']['tags_at_peak']['activation'])"
    done
    if [ -x "$BUILD/kiln_tests_unit" ]; then
      run "$BUILD/kiln_tests_unit" -tc="accumulation: train_step accum 4 x 16*" -s | grep -E 'MESSAGE|max \||test cases' | sed 's/^.*MESSAGE: //'
    else
      echo "(kiln_tests_unit not built: skipped the numerics)"
    fi
    ;;
  reset)
    section "reset: reset_all_parameters() + empty_cache() every 1000 steps, small_cnn on Fashion-MNIST"
    (cd "$TMP" && run "$BUILD/rules_reset_parameters" --steps 1875 --reset-every 1000 --eval-every 250 --csv reset.csv)
    "$PY" "$ROOT/scripts/plot_reset_curve.py" "$TMP/reset.csv" "$ROOT/docs/memory-rules-reset.svg"
    ;;
  *)
    echo "memory_rules: unknown section '$s'" >&2
    exit 2
    ;;
  esac
done
