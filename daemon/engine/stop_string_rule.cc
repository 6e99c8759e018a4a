#include "daemon/engine/stop_string_rule.h"

#include <algorithm>
#include <span>
#include <string_view>
#include <utility>

namespace niels::daemon::engine {

StopStringRule::StopStringRule(const text::Tokenizer& tokenizer, std::vector<std::string> stops)
    : tokenizer_(tokenizer), stream_(tokenizer), scanner_(std::move(stops)) {}

bool StopStringRule::Add(int32_t id, bool flush) {
  if (scanner_.match()) return true;
  ids_.push_back(id);
  const std::string added = stream_.Add(id, flush);
  flushed_ = flush;
  const std::optional<text::StopMatch> match = scanner_.Feed(added);
  text_ += added;
  if (!match) {
    text_ends_.push_back(text_.size());
    return false;
  }
  text_.resize(match->start);
  // The ids wholly before the match: the longest leading run whose decoding is a prefix of text_.
  // Candidates are the ids whose completed text ended at or before the match's start; the last of
  // them may still hold bytes of a character the match begins with, hence the check by decoding.
  size_t kept = static_cast<size_t>(std::upper_bound(text_ends_.begin(), text_ends_.end(), text_.size()) -
                                    text_ends_.begin());
  while (kept > 0) {
    const std::string decoded = tokenizer_.Decode(std::span<const int32_t>(ids_).first(kept));
    if (std::string_view(text_).starts_with(decoded)) break;
    --kept;
  }
  kept_ = kept;
  return true;
}

std::optional<std::string> StopStringRule::matched() const {
  if (!scanner_.match()) return std::nullopt;
  return scanner_.stops()[scanner_.match()->index];
}

std::string StopStringRule::TakeShown() {
  size_t showable = text_.size();
  if (!scanner_.match() && !flushed_) showable -= std::min(showable, scanner_.held_back());
  if (showable <= shown_) return {};
  std::string out = text_.substr(shown_, showable - shown_);
  shown_ = showable;
  return out;
}

}  // namespace niels::daemon::engine
