#pragma once
// TextStream: the text of a growing list of sampled ids, handed out in pieces for stream events.
//
// While the decoded text ends in an incomplete UTF-8 sequence (or in U+FFFD, which SentencePiece's
// byte fallback yields for partial bytes) that tail is held back, unless `flush`. Special ids
// decode to nothing, so adding eot only flushes. The concatenation of everything returned, after a
// flushing Add(), equals the decoding of all ids (Tokenizer::Decode), and after every Add() it is
// the longest complete prefix of that decoding (CompleteUtf8Prefix), as decoding all ids again
// would give.
//
// Cost: each Add() decodes only the ids since the last "anchor", not the whole list. An anchor is
// the last id at a moment when everything was handed out and that id is an ordinary text piece
// (Tokenizer::IsTextPiece) that decodes to some text on its own: from there SentencePiece decodes
// the following ids the same whether the ids before it are there or not, so decoding [anchor,
// following ids] and dropping the anchor's own text gives exactly their part of the whole decoding.
// A reply of n tokens costs O(n), not O(n^2), decoding work.
// Not thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/text/tokenizer.h"

namespace niels::daemon::text {

class TextStream {
 public:
  explicit TextStream(const text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Appends `id` and returns the newly completed text (possibly empty).
  std::string Add(int32_t id, bool flush);
  // Everything handed out so far.
  const std::string& sent() const { return sent_; }

 private:
  const text::Tokenizer& tokenizer_;
  // The anchor (if any) and the ids after it; all ids while there is no anchor yet.
  std::vector<int32_t> window_;
  size_t anchor_bytes_ = 0;  // bytes of the anchor's own decoding at the start of window_'s (0: none)
  std::string window_sent_;  // what was handed out of the text after the anchor
  std::string sent_;
};

// `text` without a trailing incomplete UTF-8 sequence and without trailing U+FFFD characters.
std::string_view CompleteUtf8Prefix(std::string_view text);

}  // namespace niels::daemon::text
