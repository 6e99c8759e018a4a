#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test with ctest; then, built
# with clang, AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer coverage and without
# libtorch, every suite but the torch reference suite, every fuzz replay, and nielsd itself under the
# integration, fault and short soak tests; the concurrency suites (kernels, state, engine, handlers,
# server, client: the worker pool, the state store's thread, the engine thread with the IO threads,
# the server) and nielsd itself under the integration and fault tests, built with ThreadSanitizer;
# and every fuzz target for a short bounded time (scripts/fuzz.sh, in the ASan+UBSan tree). Each
# phase's wall time is printed as it ends and again at the end.
#
# Usage: scripts/test.sh                        everything above (the README's test command, CI)
#        scripts/test.sh --sanitize LIST        only the sanitizer build LIST ("address,undefined" or
#                                               "thread") and its suites, in build-<name>/
#        scripts/test.sh --no-extras            only the normal build and ctest
# Environment: BUILD_DIR (default build), FUZZ_SECONDS (per target in the default run, default 10).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=$(nproc)
[ "$JOBS" -gt 2 ] || JOBS=2
BUILD_DIR=${BUILD_DIR:-build}

# What each sanitizer build runs, and builds (only these targets and what they depend on).
# ASan+UBSan (clang, with the fuzz targets: scripts/configure_sanitizer.sh): every suite but
# torch_reference_test (libtorch), nielsd itself under the integration, fault and short soak tests,
# and every fuzz replay; not the script-driven tests (Python converter and client, quickstart: they
# run uninstrumented interpreters), nor soak_short_nofile (soak_short covers the same code), so not
# the tools and client libraries only those use.
ASAN_SUITES=(common_test state_test kernels_test kernels_ggml_test formats_test text_test sampling_test tool_calls_test
             grammar_test jinja_test model_test loaders_test quantize_test sessions_test engine_test
             handlers_test server_test client_test integration_test fault_test)
ASAN_TARGETS=("${ASAN_SUITES[@]}" nielsd niels-chat nielsd-soak niels_fuzz_targets)
ASAN_TESTS="^($(IFS='|'; echo "${ASAN_SUITES[*]}")|soak_short|fuzz_replay_.*)\$"
# TSan: the suites where threads meet -- the kernels' worker pool, the state store and its
# maintenance thread, the engine thread with the IO threads that submit to it and the worker pool
# it runs the model on (engine, handlers), the server's IO threads, the client -- and nielsd itself,
# all of those threads in one process, under the integration and fault tests. Only these targets
# (and nielsd, niels-chat) are built. SentencePiece goes through daemon/text/sanitizer's bridge, as
# under ASan.
TSAN_SUITES=(kernels_test state_test engine_test handlers_test server_test client_test integration_test fault_test)
TSAN_TARGETS=("${TSAN_SUITES[@]}" nielsd niels-chat)
TSAN_TESTS="^($(IFS='|'; echo "${TSAN_SUITES[*]}"))\$"
# Three integration tests measure what ASan changes, so they do not run under it: the never-reading
# flood bounds nielsd's RSS growth and the idle daemon must hand its activation memory back (ASan's
# quarantine keeps freed memory resident, and its allocator ignores malloc_trim), and the
# out-of-descriptors test exhausts nielsd's descriptors on purpose (UBSan's vptr check then cannot
# open the pipe() it probes memory with and reports a valid object as having an invalid vptr).
ASAN_GTEST_FILTER='-LimitsTest.NeverReadingFloodDoesNotGrowTheDaemon:LimitsTest.IdleDaemonHandsActivationMemoryBack:LimitsTest.OutOfFileDescriptorsRefusesCleanlyAndRecovers'
# Under TSan the never-reading flood does not run either: TSan shadows every byte of application
# memory the daemon touches and keeps metadata beside it, so the reply backlog the test bounds
# shows several times over in nielsd's RSS (TSan's profile_memory on a Zen 4: heap +19 MB, shadow
# +37 MB, metadata +9 MB, RSS +68 MB against the test's 64 MiB). The idle daemon's trim and the
# out-of-descriptors test hold under TSan and run.
TSAN_GTEST_FILTER='-LimitsTest.NeverReadingFloodDoesNotGrowTheDaemon'

PHASES=()
phase_start=$SECONDS
# end_phase NAME: records how long the phase that just ended took.
end_phase() {
  local took=$((SECONDS - phase_start))
  PHASES+=("$(printf '%-34s %4d min %02d s' "$1" $((took / 60)) $((took % 60)))")
  echo "== $1: $((took / 60)) min $((took % 60)) s"
  phase_start=$SECONDS
}
print_phases() {
  echo "== phase times"
  printf '   %s\n' "${PHASES[@]}"
  echo "   total $((SECONDS / 60)) min $((SECONDS % 60)) s"
}

# sanitize LIST: configures build-<dir>/ (scripts/configure_sanitizer.sh: clang, -O1, no libtorch),
# builds what its suites need, and runs them. The ASan+UBSan tree has libFuzzer's coverage: the fuzz
# campaigns at the end build nothing more. The test code of the suites that only drive processes
# and sockets or run for a few seconds (common, state, sessions, server, client, integration) is
# compiled at -O0 there, in about 0.6 of -O1's compile time (tests/CMakeLists.txt: which and why).
sanitize() {
  local list=$1 dir tests targets kind
  case "$list" in
    address,undefined|undefined,address|address) kind=address; dir=build-asan; tests=$ASAN_TESTS; targets=("${ASAN_TARGETS[@]}") ;;
    thread) kind=thread; dir=build-tsan; tests=$TSAN_TESTS; targets=("${TSAN_TARGETS[@]}") ;;
    *) echo "test.sh: --sanitize takes address,undefined or thread, not '$list'" >&2; return 2 ;;
  esac
  echo "== sanitizer build $list in $dir"
  scripts/configure_sanitizer.sh "$kind" "$dir"
  cmake --build "$dir" -j"$JOBS" --target "${targets[@]}"
  end_phase "build $dir"
  # halt_on_error: the first report fails the test; detect_leaks stays on (LeakSanitizer), with no
  # suppressions.
  # TSan: the kernel's 32+ bits of mmap randomisation confuse TSan's fixed memory layout, so the
  # tests run with ASLR off (setarch -R); second_deadlock_stack for readable lock-order reports.
  (cd "$dir" &&
   if [ "$list" = thread ]; then export GTEST_FILTER=$TSAN_GTEST_FILTER; else export GTEST_FILTER=$ASAN_GTEST_FILTER; fi &&
   ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1 \
   UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
   TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
   setarch "$(uname -m)" -R ctest --output-on-failure -j"$JOBS" --timeout 900 -R "$tests")
  end_phase "tests in $dir"
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

scripts/setup.sh --packages-only
end_phase "packages"
BUILD_DIR=$BUILD_DIR scripts/setup.sh
end_phase "build $BUILD_DIR"
(cd "$BUILD_DIR" && ctest --output-on-failure -j"$(nproc)" --timeout 600)
end_phase "tests in ${BUILD_DIR}"
if [ "${1:-}" = "--no-extras" ]; then print_phases; exit 0; fi

sanitize address,undefined
sanitize thread
scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
end_phase "fuzz build and runs"
print_phases
