#include "daemon/text/reply_splitter.h"

#include <algorithm>
#include <utility>

namespace niels::daemon::text {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Length of the longest suffix of `text` that is a proper prefix of `tag` (a tag that may still be
// arriving).
size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (tag.starts_with(text.substr(text.size() - n))) return n;
  }
  return 0;
}

// `text` without its trailing newlines.
std::string_view StripTrailingNewlines(std::string_view text) {
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  return text;
}

}  // namespace

ReplySplitter::ReplySplitter(std::optional<ReasoningTags> tags, bool starts_in_reasoning)
    : tags_(std::move(tags)) {
  if (tags_ && (tags_->open.empty() || tags_->close.empty())) tags_.reset();
  if (!tags_) {
    state_ = State::kAnswer;
  } else {
    state_ = starts_in_reasoning ? State::kReasoningStart : State::kStart;
  }
}

ReplyDelta ReplySplitter::Add(std::string_view text) {
  pending_.append(text);
  ReplyDelta out;
  Drain(out);
  return out;
}

ReplyDelta ReplySplitter::Finish() {
  ReplyDelta out;
  Drain(out);
  switch (state_) {
    case State::kStart:  // whitespace and the start of the open tag: not reasoning after all
    case State::kAnswerStart:
    case State::kAnswer:
      out.answer += pending_;
      break;
    case State::kReasoningStart:
    case State::kReasoning:
      out.reasoning += StripTrailingNewlines(pending_);
      break;
  }
  pending_.clear();
  state_ = State::kAnswer;
  return out;
}

ReplyDelta ReplySplitter::Split(std::string_view text, const std::optional<ReasoningTags>& tags,
                                bool starts_in_reasoning) {
  ReplySplitter splitter(tags, starts_in_reasoning);
  ReplyDelta out = splitter.Add(text);
  ReplyDelta rest = splitter.Finish();
  out.answer += rest.answer;
  out.reasoning += rest.reasoning;
  return out;
}

void ReplySplitter::Drain(ReplyDelta& out) {
  for (;;) {
    switch (state_) {
      case State::kStart:
        if (!DrainStart()) return;
        break;
      case State::kReasoningStart:
      case State::kAnswerStart: {
        const size_t first = pending_.find_first_not_of('\n');
        if (first == std::string::npos) {
          pending_.clear();
          return;
        }
        pending_.erase(0, first);
        state_ = state_ == State::kReasoningStart ? State::kReasoning : State::kAnswer;
        break;
      }
      case State::kReasoning:
        if (!DrainReasoning(out)) return;
        break;
      case State::kAnswer:
        out.answer += pending_;
        pending_.clear();
        return;
    }
  }
}

bool ReplySplitter::DrainStart() {
  const std::string& open = tags_->open;
  size_t start = 0;
  while (start < pending_.size() && IsSpace(pending_[start])) ++start;
  const std::string_view rest = std::string_view(pending_).substr(start);
  if (rest.starts_with(open)) {
    pending_.erase(0, start + open.size());
    state_ = State::kReasoningStart;
    return true;
  }
  if (std::string_view(open).starts_with(rest)) return false;  // may still become the open tag
  state_ = State::kAnswer;
  return true;
}

bool ReplySplitter::DrainReasoning(ReplyDelta& out) {
  const std::string& close = tags_->close;
  const size_t at = pending_.find(close);
  if (at != std::string::npos) {
    out.reasoning += StripTrailingNewlines(std::string_view(pending_).substr(0, at));
    pending_.erase(0, at + close.size());
    state_ = State::kAnswerStart;
    return true;
  }
  // Hold back a partial close tag at the end and the newlines before it.
  size_t keep_from = pending_.size() - PartialTagSuffix(pending_, close);
  while (keep_from > 0 && pending_[keep_from - 1] == '\n') --keep_from;
  out.reasoning.append(pending_, 0, keep_from);
  pending_.erase(0, keep_from);
  return false;
}

}  // namespace niels::daemon::text
