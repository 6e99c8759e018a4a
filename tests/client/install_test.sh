#!/usr/bin/env bash
# client_install: what a user building on nielsd does. Installs the client component into a temp
# prefix (cmake --install --component client), starts a real nielsd with the shipped model, then
#   1. configures and builds tests/client/install_consumer out of tree with find_package(nielsd_client)
#      and runs it against nielsd;
#   2. builds the same program with only `pkg-config --cflags --libs nielsd_client` and runs it;
#   3. runs the Python package's test, client/python/example.py and `python3 -m nielsd_client chat`
#      from the installed package in a clean environment (env -i, PYTHONPATH = the prefix only).
# Also checks the installed library carries none of niels-chat's REPL (no libedit, no ChatRepl),
# and that proto/PROTOCOL.md's worked example is byte-exact against this nielsd.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
prefix=$tmp/prefix
sock=$tmp/nielsd.sock
nielsd_pid=""
cleanup() {
  if [ -n "$nielsd_pid" ]; then kill -TERM "$nielsd_pid" 2>/dev/null; wait "$nielsd_pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
check() {  # check NAME COMMAND...: runs the command, output in $tmp/NAME.log
  local name=$1
  shift
  if "$@" >"$tmp/$name.log" 2>&1; then
    echo "ok   $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name:"
    sed 's/^/    /' "$tmp/$name.log" | tail -40
    failed=$((failed + 1))
  fi
}

if ! cmake --install "$build" --prefix "$prefix" --component client >"$tmp/install.log" 2>&1; then
  echo "FAIL cmake --install"; cat "$tmp/install.log"; exit 1
fi
lib=$(find "$prefix" -name 'libnielsd_client.so' | head -1)
pcdir=$(dirname "$(find "$prefix" -name nielsd_client.pc | head -1)")
pydir=$(find "$prefix" -type d -path '*/dist-packages' | head -1)
echo "installed: $lib, $pcdir/nielsd_client.pc, $pydir/nielsd_client"

no_repl_in_library() {
  [ -n "$lib" ] || { echo "libnielsd_client.so not installed"; return 1; }
  if ldd "$lib" | grep -i libedit; then echo "links libedit"; return 1; fi
  local symbols
  symbols=$(nm -DC --defined-only "$lib") || return 1
  if grep -E 'ChatRepl|ParseChatFlags|HistoryFile|CLI::' <<<"$symbols"; then echo "carries REPL code"; return 1; fi
  grep -q 'niels::client::DaemonClient::Connect' <<<"$symbols"
}
check library_has_no_repl no_repl_in_library
check headers_installed test -f "$prefix/include/nielsd/client/daemon_client.h" -a \
  -f "$prefix/include/nielsd/niels/v1/nielsd.pb.h" -a -f "$prefix/include/nielsd/common/status.h"
check python_package_installed test -f "$pydir/nielsd_client/nielsd_pb2.py" -a -f "$pydir/nielsd_client/__main__.py"

"$build/daemon/nielsd" --model "$src/models/niels-demo" --socket "$sock" --threads 1 >"$tmp/nielsd.log" 2>&1 &
nielsd_pid=$!
for _ in $(seq 1 300); do
  [ -S "$sock" ] && break
  kill -0 "$nielsd_pid" 2>/dev/null || break
  sleep 0.1
done
if [ ! -S "$sock" ]; then echo "FAIL nielsd did not start:"; cat "$tmp/nielsd.log"; exit 1; fi

check protocol_md_example /usr/bin/python3 "$src/tests/client/protocol_example_test.py" \
  "$src/proto/PROTOCOL.md" "$sock"

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake_consumer() {
  cmake -S "$src/tests/client/install_consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    "${launcher[@]}" && cmake --build "$tmp/consumer" && "$tmp/consumer/consumer" "$sock" &&
    grep -q '^reply: ' <("$tmp/consumer/consumer" "$sock")
}
check find_package_consumer cmake_consumer

pkgconfig_consumer() {
  local flags
  flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs nielsd_client) || return 1
  echo "pkg-config: $flags"
  # shellcheck disable=SC2086
  ${CXX:-c++} -std=c++20 "$src/tests/client/install_consumer/consumer.cc" -o "$tmp/consumer_pc" $flags \
    -Wl,-rpath,"$(dirname "$lib")" && "$tmp/consumer_pc" "$sock"
}
check pkg_config_consumer pkgconfig_consumer

clean_python() { env -i PYTHONPATH="$pydir" /usr/bin/python3 "$@"; }
check python_package clean_python "$src/tests/client/python_package_test.py" --socket "$sock" --prefix "$prefix"
python_example() {
  clean_python "$src/client/python/example.py" --socket "$sock" --max-new-tokens 8 | tee /dev/stderr | grep -q '^reply:'
}
check python_example python_example
python_chat() {  # one reply per line; /exit stops reading (greedy: the same reply both times)
  local out one
  out=$(printf 'how do i start nielsd?\n/exit\nnever sent\n' |
        clean_python -m nielsd_client chat --socket "$sock" --greedy --max-new-tokens 12) || return 1
  one=$(printf 'how do i start nielsd?\n' |
        clean_python -m nielsd_client chat --socket "$sock" --greedy --max-new-tokens 12) || return 1
  echo "$out"
  [ -n "$out" ] && [ "$out" = "$one" ]
}
check python_m_chat python_chat

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
