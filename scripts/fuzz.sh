#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz/fuzz_<name>.cpp) for SECONDS each (default 60), one after
# the other at low priority, starting from its corpus tests/fuzz/corpus/<name>/, then merges what
# it found into that corpus (-merge=1: only inputs that add coverage are kept; inputs capped at
# FUZZ_MAX_LEN bytes, default 4096). Builds the targets in build-asan (clang, ASan + UBSan) first.
# Prints one line per target: seconds, executions, corpus files, findings (crash/leak/timeout/oom
# files are left in build-asan/fuzz-artifacts/). Exit status 1 when any target found something.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (TARGET: e.g. npy jpeg; default all)
#   FUZZ_BUILD=0: use the targets already built in build-asan (skip configure and build)
#   FUZZ_TIMEOUT=N: seconds (wall clock) one input may take before it counts as a hang (default 10;
#   raise it on a loaded machine, where a starved fuzzer reports false hangs)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
max_len=${FUZZ_MAX_LEN:-4096}
jobs=$(nproc 2>/dev/null || echo 2)
if [ "${FUZZ_BUILD:-1}" != 0 ]; then
  # A build-asan configured with another compiler (gcc, before the switch to clang) is configured afresh.
  if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++' build-asan/CMakeCache.txt; then
    rm -rf build-asan/CMakeCache.txt build-asan/CMakeFiles
  fi
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DKILN_BENCH=OFF -DKILN_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do n=$(basename "$f" .cpp); targets+=("${n#fuzz_}"); done
fi
[ "${FUZZ_BUILD:-1}" = 0 ] || cmake --build build-asan -j"$jobs" --target "${targets[@]/#/fuzz_}"
mkdir -p build-asan/fuzz-artifacts build-asan/fuzz-logs
status=0
printf '%-18s %8s %12s %8s  %s\n' target seconds executions corpus findings
for t in "${targets[@]}"; do
  bin=build-asan/fuzz_$t corpus=tests/fuzz/corpus/$t new=build-asan/fuzz-new/$t log=build-asan/fuzz-logs/$t.log
  rm -rf "$new" && mkdir -p "$new" "$corpus"
  rm -f build-asan/fuzz-artifacts/"$t"-*
  start=$(date +%s)
  rc=0
  ASAN_OPTIONS=detect_leaks=1 nice -n 19 "$bin" -max_total_time="$secs" -max_len="$max_len" -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-asan/fuzz-artifacts/"$t"- \
    "$new" "$corpus" >"$log" 2>&1 || rc=$?
  ran=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  nice -n 19 "$bin" -merge=1 -max_len="$max_len" "$corpus" "$new" >>"$log" 2>&1 || true
  # slow-unit-* files (an input over 10 s, wall clock) are listed but not counted: on a loaded
  # machine they are mostly a starved process; crash, leak, timeout and oom files are findings.
  findings=$(cd build-asan/fuzz-artifacts && ls "$t"-crash-* "$t"-leak-* "$t"-timeout-* "$t"-oom-* 2>/dev/null | tr '\n' ' ' || true)
  slow=$(cd build-asan/fuzz-artifacts && ls "$t"-slow-unit-* 2>/dev/null | wc -l || true)
  if [ $rc -ne 0 ] || [ -n "$findings" ]; then status=1; fi
  printf '%-18s %8s %12s %8s  %s\n' "$t" "$ran" "${execs:-?}" "$(ls "$corpus" | wc -l)" \
    "${findings:-none}$([ "$slow" -gt 0 ] && echo " ($slow slow-unit file(s))")"
done
exit $status
