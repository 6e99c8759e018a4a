#pragma once
// Small BpeSpecs for unit tests: the 256 byte pieces (id = byte value) plus the results of the
// given merges, in order, and optionally added tokens.

#include <string>
#include <utility>
#include <vector>

#include "daemon/text/bpe_spec.h"
#include "daemon/text/byte_level.h"

namespace niels::daemon::text::testing {

// The byte-level spelling of raw bytes ("a b" -> "aĠb").
inline std::string Spell(std::string_view bytes) {
  std::string out;
  AppendByteLevel(bytes, &out);
  return out;
}

// `merges` are pairs of raw byte strings; their results get ids 256, 257, ... in order (a result
// already present keeps its id).
inline BpeSpec ByteSpec(const std::vector<std::pair<std::string, std::string>>& merges,
                        std::vector<std::string> patterns = {std::string(kLlama3SplitPattern)}) {
  BpeSpec spec;
  for (int b = 0; b < 256; ++b) {
    spec.pieces.push_back(Spell(std::string(1, static_cast<char>(b))));
    spec.types.push_back(TokenType::kNormal);
  }
  for (const auto& [a, b] : merges) {
    spec.merges.emplace_back(Spell(a), Spell(b));
    const std::string merged = Spell(a + b);
    bool present = false;
    for (const auto& p : spec.pieces) present |= p == merged;
    if (!present) {
      spec.pieces.push_back(merged);
      spec.types.push_back(TokenType::kNormal);
    }
  }
  spec.pre_tokenizer.split_patterns = std::move(patterns);
  return spec;
}

// Appends an added token and returns its id.
inline int32_t AddToken(BpeSpec* spec, const std::string& text, bool special, AddedTokenFlags flags = {}) {
  const auto id = static_cast<int32_t>(spec->pieces.size());
  spec->pieces.push_back(text);
  spec->types.push_back(special ? TokenType::kControl : TokenType::kUserDefined);
  spec->added_flags.emplace_back(id, flags);
  return id;
}

}  // namespace niels::daemon::text::testing
