#!/usr/bin/env bash
# Runs the README's first command (scripts/quickstart.sh) non-interactively: one question piped in.
# Passes when it prints a reply, exits 0, leaves no nielsd running that it started, and its stderr is
# the four progress lines (no compiler output: that goes to the build log). Then a failing build:
# quickstart must exit non-zero and print the log's tail and its path.
# Usage: quickstart_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sock="$tmp/nielsd.sock"

out=$(echo "how do i start nielsd?" | NIELSD_SOCKET="$sock" XDG_STATE_HOME="$tmp/state" BUILD_DIR="$build" "$src/scripts/quickstart.sh" --greedy 2>"$tmp/err")
rc=$?
fail=0
if [ $rc -ne 0 ]; then echo "FAIL: quickstart exited $rc"; cat "$tmp/err"; fail=1; fi
if [ -z "${out//[[:space:]]/}" ]; then echo "FAIL: no reply printed"; cat "$tmp/err"; fail=1; fi
echo "reply: $out"
if pgrep -f -- "--socket $sock" >/dev/null; then
  echo "FAIL: a nielsd started by quickstart is still running"; pkill -f -- "--socket $sock"; fail=1
fi
if [ -e "$sock" ]; then echo "FAIL: socket file left behind"; fail=1; fi

# Progress: one line per step, in order, and nothing else before the chat starts.
echo "progress:"; cat "$tmp/err"
for step in "[1/4] checking Debian packages" "[2/4] building 100%: done" "[3/4] starting nielsd" "[4/4] ready"; do
  grep -qF "quickstart: $step" "$tmp/err" || { echo "FAIL: no progress line '$step'"; fail=1; }
done
if [ "$(grep -vc '^quickstart: ' "$tmp/err")" -ne 0 ]; then
  echo "FAIL: stderr has lines other than progress lines"; fail=1
fi
if ! grep -q "quickstart: built nielsd and niels-chat" "$build/quickstart.log"; then
  echo "FAIL: the build log lacks the build"; fail=1
fi

# A failed step: a build directory whose cache is garbage makes the build step fail.
mkdir -p "$tmp/broken"
echo "this is not a CMake cache" >"$tmp/broken/CMakeCache.txt"
echo "question" | BUILD_DIR="$tmp/broken" NIELSD_SOCKET="$sock" "$src/scripts/quickstart.sh" >"$tmp/out2" 2>"$tmp/err2"
rc=$?
echo "failing build run (exit $rc):"; cat "$tmp/err2"
if [ $rc -eq 0 ]; then echo "FAIL: quickstart succeeded with a broken build"; fail=1; fi
grep -qF "building failed" "$tmp/err2" || { echo "FAIL: no failure line"; fail=1; }
grep -qF "the whole log is $tmp/broken/quickstart.log" "$tmp/err2" || { echo "FAIL: log path not printed"; fail=1; }
grep -qF "    " "$tmp/err2" || { echo "FAIL: no log tail printed"; fail=1; }
if [ $fail -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
