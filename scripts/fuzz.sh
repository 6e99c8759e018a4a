#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (everything with ASan and UBSan) and runs each for
# SECONDS (default 60), FUZZ_PARALLEL at a time. Every target is built with clang and
# -fsanitize=fuzzer in the ASan+UBSan tree build-asan/ (scripts/configure_sanitizer.sh; the sanitizer
# suites of scripts/test.sh build there too), without libtorch, which none of them needs.
# Crash inputs are saved under build-asan/fuzz-artifacts/<target>/; the script exits non-zero when
# any target found one (copy it to tests/fuzz/<target>/regressions/ after fixing the bug: the
# fuzz_replay_<target> ctest then replays it forever).
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (targets: frame_decoder config tokenizer
#        text_stream safetensors model_dir request gguf grammar tokenizer_json jinja family_model
#        quantize tokenizer_config hf_index state_files tool_calls connection chat_format http_request
#        probe_sites; default all)
#        scripts/fuzz.sh --totals                 executions per target over every run so far:
#                                                 the committed ledger tests/fuzz/executions.tsv
#                                                 plus this machine's build-asan/fuzz-executions.tsv
#        scripts/fuzz.sh --record                 moves this machine's ledger lines into the
#                                                 committed ledger (commit it with the corpora)
#        scripts/fuzz.sh --merge TARGET...        minimizes what this machine's campaigns grew into
#                                                 tests/fuzz/<target>/grown/ (commit it: later
#                                                 campaigns and the replay ctests start from it)
# Environment: FUZZ_NICE (default 10), FUZZ_JOBS (build parallelism, default 2), FUZZ_PARALLEL
#              (campaigns at a time, default one per core),
#              FUZZ_ARGS (extra libFuzzer flags, e.g. "-runs=1000000").
#
# A run stopped by SIGINT or SIGTERM is recorded as "interrupted" with the executions it made, and
# the script stops there.
# Every run uses -malloc_limit_mb=64 (a single allocation above 64 MiB is a finding: nothing may be
# sized from a client-supplied length before it is validated) and -rss_limit_mb=2048. Each run
# appends one line to build-asan/fuzz-executions.tsv (date, target, seconds, executions, exec/s,
# result), the ledger --totals sums.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build-asan
LEDGER="$BUILD/fuzz-executions.tsv"
COMMITTED_LEDGER=tests/fuzz/executions.tsv   # campaigns of earlier machines (same columns)
# `request` links the handlers and, through them, only the server's request contract (Job,
# ResponseSink, RequestService: niels_server_contract), never the server's Asio coroutines.
# `connection` links the server itself (niels_server): Boost 1.74's Asio sees no co_await under
# clang, so the root CMakeLists.txt says clang 14 has it, and the sanitizer build leaves out
# -fsanitize=function, which cannot instrument coroutines.
ALL_TARGETS=(frame_decoder config tokenizer text_stream safetensors model_dir request gguf grammar tokenizer_json jinja family_model quantize tokenizer_config hf_index state_files tool_calls connection chat_format http_request probe_sites)
# Every campaign and merge: a single allocation above 64 MiB is a finding (nothing may be sized
# from a client-supplied length before it is checked).
LIMITS=(-malloc_limit_mb=64 -rss_limit_mb=2048 -timeout=30 -max_len=65536)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OMP_NUM_THREADS=1

if [ "${1:-}" = "--totals" ]; then
  ledgers=()
  for l in "$COMMITTED_LEDGER" "$LEDGER"; do [ -f "$l" ] && ledgers+=("$l"); done
  [ ${#ledgers[@]} -gt 0 ] || { echo "no runs recorded"; exit 0; }
  printf "%-14s %6s %9s %14s %9s %s\n" target runs seconds executions exec/s crashes
  grep -hv '^#' "${ledgers[@]}" |
  awk -F'\t' '{ execs[$2] += $4; secs[$2] += $3; runs[$2]++; if ($6 == "crash") bad[$2]++
                if ($3 > 0) timed[$2] += $4 }   # lines carried over as totals have no seconds
    END { for (t in execs) printf "%-14s %6d %9d %14d %9.0f %d\n", t, runs[t], secs[t], execs[t],
                                  secs[t] ? timed[t] / secs[t] : 0, bad[t] }' | sort
  exit 0
fi

if [ "${1:-}" = "--record" ]; then
  [ -s "$LEDGER" ] || { echo "nothing to record: $LEDGER is empty"; exit 0; }
  cat "$LEDGER" >>"$COMMITTED_LEDGER"
  echo "recorded $(wc -l <"$LEDGER") campaign(s) in $COMMITTED_LEDGER"
  rm "$LEDGER"
  exit 0
fi

if [ "${1:-}" = "--merge" ]; then
  shift
  [ $# -gt 0 ] || { echo "usage: scripts/fuzz.sh --merge TARGET..."; exit 2; }
  for t in "$@"; do
    [ -x "$BUILD/tests/fuzz/fuzz_$t" ] || { echo "fuzz.sh: build fuzz_$t first (scripts/fuzz.sh 1 $t)"; exit 2; }
    # libFuzzer's merge copies into the first directory only the inputs that add coverage to what it
    # holds. It starts with copies of the seeds, which are removed afterwards: grown/ keeps exactly
    # what the committed seeds do not cover, of the old grown/ and this machine's corpus.
    work=$(mktemp -d)
    cp tests/fuzz/"$t"/corpus/* "$work"/
    sources=()
    for d in tests/fuzz/"$t"/grown "$BUILD/fuzz-corpus/$t"; do [ -d "$d" ] && sources+=("$d"); done
    "$BUILD/tests/fuzz/fuzz_$t" -merge=1 "${LIMITS[@]}" "$work" "${sources[@]}" >"$BUILD/merge-$t.log" 2>&1 ||
      { echo "fuzz.sh: merging $t failed; log $BUILD/merge-$t.log"; tail -20 "$BUILD/merge-$t.log"; exit 1; }
    for f in tests/fuzz/"$t"/corpus/*; do rm -f "$work/$(basename "$f")"; done
    rm -rf tests/fuzz/"$t"/grown
    mkdir -p tests/fuzz/"$t"/grown
    find "$work" -type f -exec mv {} tests/fuzz/"$t"/grown/ \;
    rm -rf "$work"
    echo "fuzz_$t: $(ls tests/fuzz/"$t"/grown | wc -l) inputs in tests/fuzz/$t/grown ($(du -sh tests/fuzz/"$t"/grown | cut -f1))"
  done
  exit 0
fi

SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")

scripts/setup.sh --packages-only
scripts/configure_sanitizer.sh address "$BUILD"
build_targets=()
for t in "${TARGETS[@]}"; do build_targets+=(--target "fuzz_$t"); done
nice -n "${FUZZ_NICE:-10}" cmake --build "$BUILD" -j"${FUZZ_JOBS:-2}" "${build_targets[@]}"
mkdir -p "$BUILD"

# campaign TARGET: one bounded campaign; prints its result; exit status 0 (no crash), 1 (a crash:
# inputs saved), 2 (another campaign of TARGET holds the lock), 130 (interrupted).
campaign() {
  local t=$1
  local corpus="$BUILD/fuzz-corpus/$t"       # grows across runs; the committed seeds stay read-only
  local artifacts="$BUILD/fuzz-artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  local seeds=(tests/fuzz/"$t"/corpus) d
  for d in grown regressions; do [ -d tests/fuzz/"$t"/$d ] && seeds+=(tests/fuzz/"$t"/$d); done
  # One campaign per target at a time: two would share the log (and so the ledger line) and race on
  # the corpus directory. The fuzzer inherits the lock and holds it until it exits.
  local lock
  exec {lock}>"$BUILD/fuzz-$t.lock"
  flock -n "$lock" || {
    echo "fuzz.sh: a campaign of $t is already running on this machine (it holds $BUILD/fuzz-$t.lock)"
    return 2
  }
  local dict_args=()  # a libFuzzer dictionary next to the corpus, when the target has one
  [ -f tests/fuzz/"$t"/"$t".dict ] && dict_args=(-dict=tests/fuzz/"$t"/"$t".dict)
  echo "== fuzz_$t for ${SECONDS_PER_TARGET}s"
  local log="$BUILD/fuzz-$t.log" started status=0 result=ok
  started=$(date +%s)
  nice -n "${FUZZ_NICE:-10}" \
    "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" "${LIMITS[@]}" -print_final_stats=1 \
      -artifact_prefix="$artifacts" "${dict_args[@]}" ${FUZZ_ARGS:-} "$corpus" "${seeds[@]}" >"$log" 2>&1 || status=$?
  # Stopped by SIGINT or SIGTERM: libFuzzer still prints its counts; not a finding.
  if [ $status -ne 0 ]; then
    if grep -q "libFuzzer: run interrupted" "$log"; then result=interrupted; else result=crash; fi
  fi
  local elapsed=$(( $(date +%s) - started )) execs rate
  exec {lock}>&-
  execs=$(grep -Eo "stat::number_of_executed_units: *[0-9]+" "$log" | grep -Eo "[0-9]+$" | tail -1 || true)
  rate=$(grep -Eo "stat::average_exec_per_sec: *[0-9]+" "$log" | grep -Eo "[0-9]+$" | tail -1 || true)
  # One short line per campaign, appended in one write: parallel campaigns do not mix their lines.
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$elapsed" "${execs:-0}" "${rate:-0}" "$result" \
    >>"$LEDGER"
  case $result in
    ok) echo "fuzz_$t: ${execs:-?} executions in ${elapsed}s (${rate:-?}/s), no crash" ;;
    interrupted) echo "fuzz_$t: interrupted after ${execs:-?} executions"; return 130 ;;
    crash) echo "fuzz_$t FAILED; input(s) saved in $artifacts; log $log"; tail -40 "$log"; return 1 ;;
  esac
}

# FUZZ_PARALLEL campaigns at a time (default: one per core; each is one process on one core); each
# one's output is printed when it ends.
parallel=${FUZZ_PARALLEL:-$(nproc)}
failed=()
declare -A pid_of
finish() {  # finish TARGET: waits for its campaign, prints its output, records a failure
  local t=$1 status=0
  wait "${pid_of[$t]}" || status=$?
  cat "$BUILD/fuzz-$t.out"
  case $status in
    0) ;;
    130) echo "fuzz.sh: interrupted"; exit 130 ;;
    *) failed+=("$t") ;;
  esac
}
running=()
for t in "${TARGETS[@]}"; do
  if [ ${#running[@]} -ge "$parallel" ]; then
    finish "${running[0]}"
    running=("${running[@]:1}")
  fi
  campaign "$t" >"$BUILD/fuzz-$t.out" 2>&1 &
  pid_of[$t]=$!
  running+=("$t")
done
for t in "${running[@]}"; do finish "$t"; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: no crash in ${TARGETS[*]}"
