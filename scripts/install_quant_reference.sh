#!/usr/bin/env bash
# Installs ggml's own quantization code as a test reference: node-llama-cpp's prebuilt llama.cpp
# (npm; its libggml-base.so exports ggml's reference quantizers quantize_row_*_ref and its
# dequantizers, libggml-cpu-*.so its CPU dot products). Used by kernels_ggml_test (the block
# formats against ggml, tests/daemon/kernels/ggml) and optionally by nielsd-quant-bench
# (--ggml-cpu-lib). Idempotent; prints the directory holding the .so files.
# Usage: scripts/install_quant_reference.sh [DIR]   (default ~/.cache/nielsd-reference/npm-quant)
# CMake finds the library there at configure time (NIELS_GGML_REFERENCE_DIR to point elsewhere).
set -euo pipefail
VERSION=3.21.1  # node-llama-cpp; ships llama.cpp release v0.4.0 (its ggml-quants.c is the reference)
DIR=${1:-${HOME}/.cache/nielsd-reference/npm-quant}
BINS="$DIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
if [ ! -f "$BINS/libggml-base.so" ]; then
  mkdir -p "$DIR"
  npm install --prefix "$DIR" --no-audit --no-fund --ignore-scripts --omit=optional --no-save \
    "node-llama-cpp@$VERSION" "@node-llama-cpp/linux-x64@$VERSION" >&2
fi
[ -f "$BINS/libggml-base.so" ] || { echo "install_quant_reference: $BINS/libggml-base.so missing" >&2; exit 1; }
echo "$BINS"
