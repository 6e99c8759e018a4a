#!/usr/bin/env bash
# Configures the ASan+UBSan tree (default build-asan/, or $1): clang, -O1, no libtorch, no benchmarks,
# and libFuzzer coverage (NIELSD_FUZZ) so that the sanitizer suites of scripts/test.sh, nielsd under
# the integration tests, the corpus replays and the campaigns of scripts/fuzz.sh all build in this
# one tree. -O1: the sanitizers' own advice for checked (not timed) code; -O2 took up to four times
# as long to compile under ASan+UBSan. Re-running it on a configured tree only reconfigures.
# Environment: extra cmake arguments in ASAN_CMAKE_ARGS (e.g. -DCMAKE_CXX_COMPILER_LAUNCHER=).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan}
# A tree configured before with another compiler (g++, as this tree once was) cannot switch: start over.
if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:FILEPATH=.*clang++' "$dir/CMakeCache.txt"; then
  echo "configure_asan.sh: $dir was configured with another compiler; rebuilding it with clang"
  rm -rf "$dir"
fi
generator=()
[ -f "$dir/CMakeCache.txt" ] || generator=(-G Ninja)
CC=clang CXX=clang++ cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DNIELSD_FUZZ=ON -DNIELSD_WITH_TORCH=OFF \
  -DNIELSD_BUILD_BENCH=OFF ${ASAN_CMAKE_ARGS:-} >/dev/null
