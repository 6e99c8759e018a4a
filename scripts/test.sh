#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test with ctest; then, built
# with AddressSanitizer + UndefinedBehaviorSanitizer and without libtorch, the suites common, state,
# kernels, server and client, every fuzz replay, and nielsd itself under the integration, fault and
# short soak tests; the concurrency suites (kernels, state, server, client) built with
# ThreadSanitizer; and every fuzz target for a short bounded time (scripts/fuzz.sh).
#
# The model, engine and handlers suites compare against libtorch, so they need a libtorch build,
# which would cost about as much CPU under ASan as the normal build again; they run under ASan by
# hand: NIELSD_ASAN_TORCH=1 scripts/test.sh --sanitize address,undefined   (build-asan-torch/)
#
# Usage: scripts/test.sh                        everything above (the README's test command, CI)
#        scripts/test.sh --sanitize LIST        only the sanitizer build LIST ("address,undefined" or
#                                               "thread") and its suites, in build-<name>/
#        scripts/test.sh --no-extras            only the normal build and ctest
# Environment: BUILD_DIR (default build), FUZZ_SECONDS (per target in the default run, default 10),
#              NIELSD_ASAN_TORCH=1 (the ASan+UBSan build with libtorch and all its suites).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=$(nproc)
[ "$JOBS" -gt 2 ] || JOBS=2

# What each sanitizer build runs. ASan+UBSan (CI): the torch-free suites, nielsd's integration and
# fault tests, the short soak, jinja_test (its reference is Python, our renderer is instrumented) and
# all eight fuzz replays, but not the script-driven tests (Python
# converter and client, quickstart: they run uninstrumented interpreters) nor soak_short_nofile
# (soak_short covers the same code). NIELSD_ASAN_TORCH=1 adds the libtorch-checked suites.
# TSan: the concurrency suites (kernels' worker pool, state's store and its maintenance thread,
# server, client).
ASAN_TESTS='^(common_test|state_test|kernels_test|jinja_test|server_test|client_test|integration_test|fault_test|soak_short|fuzz_replay_.*)$'
ASAN_TORCH_TESTS='^(common_test|state_test|kernels_test|jinja_test|server_test|client_test|model_test|engine_test|handlers_test|integration_test|fault_test|soak_short|fuzz_replay_.*)$'
TSAN_TESTS='^(kernels_test|state_test|server_test|client_test)$'
# Two integration tests measure what ASan changes, so they do not run under it: the never-reading
# flood bounds nielsd's RSS growth (ASan's quarantine keeps freed memory resident), and the
# out-of-descriptors test exhausts nielsd's descriptors on purpose (UBSan's vptr check then cannot
# open the pipe() it probes memory with and reports a valid object as having an invalid vptr).
ASAN_GTEST_FILTER='-LimitsTest.NeverReadingFloodDoesNotGrowTheDaemon:LimitsTest.OutOfFileDescriptorsRefusesCleanlyAndRecovers'

# sanitize LIST: configures build-<dir>/ with NIELSD_SANITIZE=LIST, builds what its suites need,
# and runs them.
sanitize() {
  local list=$1 dir tests torch
  case "$list" in
    address,undefined|undefined,address|address)
      if [ "${NIELSD_ASAN_TORCH:-0}" = 1 ]; then dir=build-asan-torch; tests=$ASAN_TORCH_TESTS; torch=ON
      else dir=build-asan; tests=$ASAN_TESTS; torch=OFF; fi ;;
    thread) dir=build-tsan; tests=$TSAN_TESTS; torch=OFF ;;
    *) echo "test.sh: --sanitize takes address,undefined or thread, not '$list'" >&2; return 2 ;;
  esac
  echo "== sanitizer build $list in $dir"
  [ -f "$dir/CMakeCache.txt" ] || cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DNIELSD_WITH_TORCH=$torch -DNIELSD_BUILD_BENCH=OFF -DNIELSD_SANITIZE="$list"
  cmake --build "$dir" -j"$JOBS"
  # halt_on_error: the first report fails the test; detect_leaks stays on (LeakSanitizer), with no
  # suppressions.
  # TSan: the kernel's 32+ bits of mmap randomisation confuse TSan's fixed memory layout, so the
  # tests run with ASLR off (setarch -R); second_deadlock_stack for readable lock-order reports.
  (cd "$dir" &&
   if [ "$list" != thread ]; then export GTEST_FILTER=$ASAN_GTEST_FILTER; fi &&
   ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1 \
   UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
   TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
   setarch "$(uname -m)" -R ctest --output-on-failure -j"$JOBS" --timeout 900 -R "$tests")
}

case "${1:-}" in
  --sanitize)
    [ $# -eq 2 ] || { echo "usage: scripts/test.sh --sanitize address,undefined|thread" >&2; exit 2; }
    scripts/setup.sh --packages-only
    sanitize "$2"
    exit ;;
  --no-extras|"") ;;
  *) echo "usage: scripts/test.sh [--sanitize LIST | --no-extras]" >&2; exit 2 ;;
esac

scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
(cd "$BUILD_DIR" && ctest --output-on-failure -j"$(nproc)" --timeout 600)
[ "${1:-}" = "--no-extras" ] && exit 0

sanitize address,undefined
sanitize thread
scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
