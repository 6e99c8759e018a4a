#!/usr/bin/env bash
# A newcomer's first command: install what is missing, build, start nielsd in the background with
# the shipped model, and open niels-chat. nielsd is stopped when the chat ends, unless it was
# already running before. Arguments are passed to niels-chat (e.g. --greedy, -p "question").
# With stdin not a terminal, niels-chat answers one line per input line and exits at EOF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

scripts/setup.sh >&2

NIELSD="$BUILD_DIR/daemon/nielsd"
CHAT="$BUILD_DIR/client/niels-chat"

# The socket path nielsd and niels-chat resolve by default (docs/ARCHITECTURE.md "The daemon
# process").
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
  echo "quickstart: using the nielsd already listening on $SOCK" >&2
else
  LOG=$(mktemp -t nielsd.XXXXXX.log)
  echo "quickstart: starting nielsd (log: $LOG)" >&2
  "$NIELSD" --socket "$SOCK" >"$LOG" 2>&1 &
  started_pid=$!
  for _ in $(seq 1 600); do
    listening && break
    if ! kill -0 "$started_pid" 2>/dev/null; then
      echo "quickstart: nielsd exited early; its log:" >&2
      cat "$LOG" >&2
      started_pid=""
      exit 1
    fi
    sleep 0.1
  done
  listening || { echo "quickstart: nielsd did not start listening on $SOCK within 60 s" >&2; exit 1; }
fi

"$CHAT" --socket "$SOCK" "$@"
