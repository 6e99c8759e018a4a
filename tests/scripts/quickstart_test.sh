#!/usr/bin/env bash
# Runs the README's first command (scripts/quickstart.sh) non-interactively: one question piped in.
# Passes when it prints a reply, exits 0, and leaves no nielsd running that it started.
# Usage: quickstart_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sock="$tmp/nielsd.sock"

out=$(echo "how do i start nielsd?" | NIELSD_SOCKET="$sock" BUILD_DIR="$build" "$src/scripts/quickstart.sh" --greedy 2>"$tmp/err")
rc=$?
fail=0
if [ $rc -ne 0 ]; then echo "FAIL: quickstart exited $rc"; cat "$tmp/err"; fail=1; fi
if [ -z "${out//[[:space:]]/}" ]; then echo "FAIL: no reply printed"; cat "$tmp/err"; fail=1; fi
echo "reply: $out"
if pgrep -f -- "--socket $sock" >/dev/null; then
  echo "FAIL: a nielsd started by quickstart is still running"; pkill -f -- "--socket $sock"; fail=1
fi
if [ -e "$sock" ]; then echo "FAIL: socket file left behind"; fail=1; fi
if [ $fail -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
