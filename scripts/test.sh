#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test with ctest; then the same
# torch-free suites (common, state, server, client) built with AddressSanitizer + UndefinedBehaviorSanitizer,
# the concurrency suites (server, client) built with ThreadSanitizer, and the torch-free fuzz targets
# for a short bounded time (scripts/fuzz.sh; the libtorch-linked targets safetensors, model_dir and
# request run as replay ctests in the normal build, and as campaigns with scripts/fuzz.sh by hand).
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

# sanitize LIST: configures build-<dir>/ with NIELSD_SANITIZE=LIST and no libtorch, builds, runs
# the suites that can run under it.
sanitize() {
  local list=$1 dir tests
  case "$list" in
    address,undefined|undefined,address|address) dir=build-asan; tests='^(common_test|state_test|server_test|client_test)$' ;;
    thread) dir=build-tsan; tests='^(server_test|client_test)$' ;;  # the concurrency suites
    *) echo "test.sh: --sanitize takes address,undefined or thread, not '$list'" >&2; return 2 ;;
  esac
  echo "== sanitizer build $list in $dir"
  [ -f "$dir/CMakeCache.txt" ] || cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DNIELSD_WITH_TORCH=OFF -DNIELSD_BUILD_BENCH=OFF -DNIELSD_SANITIZE="$list"
  cmake --build "$dir" -j"$JOBS"
  # halt_on_error: the first report fails the test; detect_leaks stays on (LeakSanitizer).
  # TSan: the kernel's 32+ bits of mmap randomisation confuse TSan's fixed memory layout, so the
  # tests run with ASLR off (setarch -R); second_deadlock_stack for readable lock-order reports.
  (cd "$dir" &&
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
scripts/fuzz.sh "${FUZZ_SECONDS:-10}" frame_decoder config tokenizer text_stream
