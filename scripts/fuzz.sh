#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang into build-fuzz/ and runs each for SECONDS
# (default 60), one after another. Crash inputs are saved under build-fuzz/fuzz-artifacts/<target>/;
# the script exits non-zero when any target found one (copy it to tests/fuzz/<target>/regressions/
# after fixing the bug: the fuzz_replay_<target> ctest then replays it forever).
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (targets: frame_decoder config tokenizer
#        text_stream safetensors model_dir request; default all)
# Environment: FUZZ_NICE (default 10), FUZZ_JOBS (build parallelism, default 2),
#              FUZZ_ARGS (extra libFuzzer flags, e.g. "-runs=1000000").
#
# Every run uses -malloc_limit_mb=64 (a single allocation above 64 MiB is a finding: nothing may be
# sized from a client-supplied length before it is validated) and -rss_limit_mb=2048.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(frame_decoder config tokenizer text_stream safetensors model_dir request)
BUILD=build-fuzz

scripts/setup.sh --packages-only
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNIELSD_FUZZ=ON \
    -DNIELSD_BUILD_BENCH=OFF
fi
build_targets=()
for t in "${TARGETS[@]}"; do build_targets+=(--target "fuzz_$t"); done
nice -n "${FUZZ_NICE:-10}" cmake --build "$BUILD" -j"${FUZZ_JOBS:-2}" "${build_targets[@]}"

failed=()
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/fuzz-corpus/$t"       # grows across runs; the committed seeds stay read-only
  artifacts="$BUILD/fuzz-artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  seeds=(tests/fuzz/"$t"/corpus)
  [ -d tests/fuzz/"$t"/regressions ] && seeds+=(tests/fuzz/"$t"/regressions)
  echo "== fuzz_$t for ${SECONDS_PER_TARGET}s"
  log="$BUILD/fuzz-$t.log"
  # ASan: no leak check per input (libtorch and protobuf keep global caches); crashes still abort.
  if ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     OMP_NUM_THREADS=1 nice -n "${FUZZ_NICE:-10}" \
     "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -malloc_limit_mb=64 \
       -rss_limit_mb=2048 -timeout=30 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$artifacts" ${FUZZ_ARGS:-} "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$log" | tail -2 || true
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
