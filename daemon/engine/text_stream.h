#pragma once
// TextStream: the text of a growing list of sampled ids, handed out in pieces for stream events.
//
// Each Add() decodes the whole list again and returns the part that extends what was handed out
// before. While the decoded text ends in an incomplete UTF-8 sequence (or in U+FFFD, which
// SentencePiece's byte fallback yields for partial bytes) that tail is held back, unless `flush`.
// Special ids decode to nothing, so adding eot only flushes. The concatenation of everything
// returned, after a flushing Add(), equals the decoding of all ids whenever decoding is
// prefix-stable (SentencePiece decoding is, apart from held-back partial characters).
// Not thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/model/tokenizer.h"

namespace niels::daemon::engine {

class TextStream {
 public:
  explicit TextStream(const model::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Appends `id` and returns the newly completed text (possibly empty).
  std::string Add(int32_t id, bool flush);
  // Everything handed out so far.
  const std::string& sent() const { return sent_; }

 private:
  const model::Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;
  std::string sent_;
};

// `text` without a trailing incomplete UTF-8 sequence and without trailing U+FFFD characters.
std::string_view CompleteUtf8Prefix(std::string_view text);

}  // namespace niels::daemon::engine
