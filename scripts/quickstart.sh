#!/usr/bin/env bash
# A newcomer's first command: install what is missing, build, start nielsd in the background with
# the shipped model, and open niels-chat. It installs and builds only what it runs: the packages of
# `scripts/setup.sh --quickstart` (no libtorch, no test tools) and the targets nielsd and niels-chat
# (scripts/test.sh installs and builds the rest). nielsd is stopped when the chat ends, unless it was
# already running before. Arguments are passed to niels-chat (e.g. --greedy, -p "question").
# With stdin not a terminal, niels-chat answers one line per input line and exits at EOF.
#
# Progress goes to stderr, one line per step; the package and build output goes to
# $BUILD_DIR/quickstart.log. When a step fails, the log's last lines and its path are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR"
LOG=$(cd "$BUILD_DIR" && pwd)/quickstart.log
: >"$LOG"

say() { echo "quickstart: $*" >&2; }
fail() {
  echo "quickstart: $1 failed; the last lines of $LOG:" >&2
  tail -n 25 "$LOG" | sed 's/^/    /' >&2
  echo "quickstart: the whole log is $LOG" >&2
  exit 1
}

say "[1/4] checking Debian packages (apt-get output: $LOG)"
scripts/setup.sh --quickstart >>"$LOG" 2>&1 || fail "installing packages"

# Building: a percentage that updates in place on a terminal, one line when it is done. A new build
# directory gets only what the quickstart runs (no libtorch, tests or benchmarks); one that
# scripts/test.sh configured already is used as it is.
say_build() { if [ -t 2 ]; then printf '\rquickstart: [2/4] building %s' "$1" >&2; fi; }
say_build "(configuring)"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNIELSD_WITH_TORCH=OFF \
        -DNIELSD_BUILD_TESTS=OFF -DNIELSD_BUILD_BENCH=OFF >>"$LOG" 2>&1 ||
    { [ -t 2 ] && echo >&2; fail "configuring"; }
fi
set +e
cmake --build "$BUILD_DIR" -j"$(nproc)" --target nielsd niels-chat 2>&1 | tee -a "$LOG" | while IFS= read -r line; do
  if [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then say_build "${BASH_REMATCH[1]}%"; fi   # make
  if [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then                                    # ninja
    say_build "$(( BASH_REMATCH[1] * 100 / BASH_REMATCH[2] ))%"
  fi
done
build_rc=${PIPESTATUS[0]}
set -e
[ -t 2 ] && printf '\r' >&2
[ "$build_rc" -eq 0 ] || { [ -t 2 ] && echo >&2; fail "building"; }
echo "quickstart: built nielsd and niels-chat" >>"$LOG"
say "[2/4] building 100%: done"

NIELSD="$BUILD_DIR/daemon/nielsd"
CHAT="$BUILD_DIR/client/niels-chat"

# The socket path nielsd and niels-chat resolve by default (docs/ARCHITECTURE.md "The daemon process").
if [ -n "${NIELSD_SOCKET:-}" ]; then
  SOCK=$NIELSD_SOCKET
elif [ -n "${XDG_RUNTIME_DIR:-}" ]; then
  SOCK=$XDG_RUNTIME_DIR/nielsd/nielsd.sock
else
  SOCK=/run/nielsd/nielsd.sock
fi

listening() {
  [ -S "$SOCK" ] && /usr/bin/python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' "$SOCK" 2>/dev/null
}

started_pid=""
cleanup() {
  if [ -n "$started_pid" ] && kill -0 "$started_pid" 2>/dev/null; then
    kill -TERM "$started_pid" 2>/dev/null || true
    wait "$started_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

if listening; then
  say "[3/4] using the nielsd already listening on $SOCK"
else
  say "[3/4] starting nielsd on $SOCK (its log: $LOG)"
  echo "--- nielsd" >>"$LOG"
  "$NIELSD" --socket "$SOCK" >>"$LOG" 2>&1 &
  started_pid=$!
  for _ in $(seq 1 600); do
    listening && break
    if ! kill -0 "$started_pid" 2>/dev/null; then
      started_pid=""
      fail "starting nielsd"
    fi
    sleep 0.1
  done
  listening || fail "starting nielsd (not listening on $SOCK within 60 s)"
fi

say "[4/4] ready: chatting with niels-chat (/help for commands, Ctrl-D to quit)"
"$CHAT" --socket "$SOCK" "$@"
