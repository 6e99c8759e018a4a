#pragma once
// StopStringRule: a request's stop strings as the generator's TextStopRule (generator.h), over the
// text of the new ids as the tokenizer decodes them (text/text_stream.h), and what a stream may show
// of that text.
//
// The reply ends before the first match (text/stop_strings.h: the first to complete): text() is
// everything before it. kept_tokens() is the longest run of leading new ids whose decoding is a
// prefix of text(): the ids wholly before the match; an id whose text reaches into the match (or
// holds part of a character that does) is rolled back by the generator. So text() may go on past
// the kept ids' own text, by the part of a straddling id that precedes the match.
//
// Streaming: TakeShown() returns the text newly safe to show since its last call: never any byte
// a stop string could still start at (the longest end of the text that is a prefix of one is held
// back), nor an incomplete character; once the text matched, or after a flushing Add(), the rest
// of text(). Joined, everything TakeShown() returned after the last id equals text().
//
// Cost: per id, the TextStream's decoding and the scanner's O(S) per byte; at a match, one decoding
// of the kept ids per id dropped (at most a few). Engine thread only.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/engine/generator.h"
#include "daemon/text/stop_strings.h"
#include "daemon/text/text_stream.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::engine {

class StopStringRule final : public TextStopRule {
 public:
  // REQUIRES: stops not empty, none empty. The tokenizer must outlive the rule.
  StopStringRule(const text::Tokenizer& tokenizer, std::vector<std::string> stops);

  bool Add(int32_t id, bool flush) override;
  size_t kept_tokens() const override { return kept_; }

  // The text of the new ids so far; after a match, the text before it.
  const std::string& text() const { return text_; }
  // The stop string that matched, if one did.
  std::optional<std::string> matched() const;
  // Newly showable text (see above).
  std::string TakeShown();

 private:
  const text::Tokenizer& tokenizer_;
  text::TextStream stream_;
  text::StopStringScanner scanner_;
  std::vector<int32_t> ids_;
  std::vector<size_t> text_ends_;  // per id before the match: text_.size() once it was added
  std::string text_;
  size_t shown_ = 0;
  bool flushed_ = false;
  size_t kept_ = 0;
};

}  // namespace niels::daemon::engine
