#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (everything with ASan and UBSan) and runs each for
# SECONDS (default 60), one after another. Every target is built with clang and
# -fsanitize=fuzzer into build-fuzz/ (without libtorch, which none of them needs).
# Crash inputs are saved under build-fuzz/fuzz-artifacts/<target>/; the script exits non-zero when
# any target found one (copy it to tests/fuzz/<target>/regressions/ after fixing the bug: the
# fuzz_replay_<target> ctest then replays it forever).
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (targets: frame_decoder config tokenizer
#        text_stream safetensors model_dir request; default all)
#        scripts/fuzz.sh --totals                 executions per target over every run so far
# Environment: FUZZ_NICE (default 10), FUZZ_JOBS (build parallelism, default 2),
#              FUZZ_ARGS (extra libFuzzer flags, e.g. "-runs=1000000").
#
# Every run uses -malloc_limit_mb=64 (a single allocation above 64 MiB is a finding: nothing may be
# sized from a client-supplied length before it is validated) and -rss_limit_mb=2048. Each run
# appends one line to build-fuzz/fuzz-executions.tsv (date, target, seconds, executions, exec/s,
# result), the ledger --totals sums.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build-fuzz
LEDGER="$BUILD/fuzz-executions.tsv"
ALL_TARGETS=(frame_decoder config tokenizer text_stream safetensors model_dir request)

if [ "${1:-}" = "--totals" ]; then
  [ -f "$LEDGER" ] || { echo "no runs recorded in $LEDGER"; exit 0; }
  awk -F'\t' '{ execs[$2] += $4; secs[$2] += $3; runs[$2]++; if ($6 != "ok") bad[$2]++ }
    END { printf "%-14s %6s %9s %14s %9s %s\n", "target", "runs", "seconds", "executions", "exec/s", "crashes";
          for (t in execs) printf "%-14s %6d %9d %14d %9.0f %d\n", t, runs[t], secs[t], execs[t],
                                  secs[t] ? execs[t] / secs[t] : 0, bad[t] }' "$LEDGER" | sort
  exit 0
fi

SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")

scripts/setup.sh --packages-only
[ -f "$BUILD/CMakeCache.txt" ] ||
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNIELSD_FUZZ=ON \
    -DNIELSD_WITH_TORCH=OFF -DNIELSD_BUILD_BENCH=OFF
build_targets=()
for t in "${TARGETS[@]}"; do build_targets+=(--target "fuzz_$t"); done
nice -n "${FUZZ_NICE:-10}" cmake --build "$BUILD" -j"${FUZZ_JOBS:-2}" "${build_targets[@]}"
mkdir -p "$BUILD"

failed=()
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/fuzz-corpus/$t"       # grows across runs; the committed seeds stay read-only
  artifacts="$BUILD/fuzz-artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  seeds=(tests/fuzz/"$t"/corpus)
  [ -d tests/fuzz/"$t"/regressions ] && seeds+=(tests/fuzz/"$t"/regressions)
  echo "== fuzz_$t for ${SECONDS_PER_TARGET}s"
  log="$BUILD/fuzz-$t.log"
  started=$(date +%s)
  result=ok
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
       OMP_NUM_THREADS=1 nice -n "${FUZZ_NICE:-10}" \
       "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -malloc_limit_mb=64 \
         -rss_limit_mb=2048 -timeout=30 -max_len=65536 -print_final_stats=1 \
         -artifact_prefix="$artifacts" ${FUZZ_ARGS:-} "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    result=crash
  fi
  elapsed=$(( $(date +%s) - started ))
  execs=$(grep -Eo "stat::number_of_executed_units: *[0-9]+" "$log" | grep -Eo "[0-9]+$" | tail -1 || true)
  rate=$(grep -Eo "stat::average_exec_per_sec: *[0-9]+" "$log" | grep -Eo "[0-9]+$" | tail -1 || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$elapsed" "${execs:-0}" "${rate:-0}" "$result" \
    >>"$LEDGER"
  if [ "$result" = ok ]; then
    echo "fuzz_$t: ${execs:-?} executions in ${elapsed}s (${rate:-?}/s), no crash"
  else
    echo "fuzz_$t FAILED; input(s) saved in $artifacts; log $log"
    tail -40 "$log"
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: no crash in ${TARGETS[*]}"
