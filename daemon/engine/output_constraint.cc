#include "daemon/engine/output_constraint.h"

#include <stdexcept>

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::engine {

using common::Status;
using grammar::TokenKind;
using grammar::VocabularyToken;

common::StatusOr<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabulary::Build(
    const text::Tokenizer& tokenizer, int32_t output_rows, std::span<const int32_t> end_ids) {
  if (output_rows <= 0) return Status::InvalidArgument(fmt::format("{} output rows", output_rows));
  const int32_t size = output_rows;  // ids past the tokenizer's (Qwen: 151,669 of 151,936) are never text
  std::vector<VocabularyToken> start(size), after(size);
  bool start_is_after = true;  // byte-level BPE: no id reads differently at the start
  for (int32_t id = 0; id < size; ++id) {
    if (std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end()) {
      start[id] = after[id] = {"", TokenKind::kEndOfOutput};
      continue;
    }
    text::TextBytes bytes = tokenizer.Bytes(id);
    if (!bytes.is_text) {
      start[id] = after[id] = {"", TokenKind::kNever};
      continue;
    }
    start_is_after = start_is_after && bytes.at_start == bytes.bytes;
    start[id] = {std::move(bytes.at_start), TokenKind::kText};  // an empty one is never allowed
    after[id] = {std::move(bytes.bytes), TokenKind::kText};
  }
  auto vocab = std::make_shared<ConstraintVocabulary>();
  auto built_after = grammar::Vocabulary::Create(std::move(after));
  if (!built_after.ok()) return built_after.status();
  vocab->after = std::move(built_after).value();
  if (start_is_after) {
    vocab->at_start = vocab->after;  // one vocabulary (half the start-up work for a 151,936-id one)
  } else {
    auto built_start = grammar::Vocabulary::Create(std::move(start));
    if (!built_start.ok()) return built_start.status();
    vocab->at_start = std::move(built_start).value();
  }
  return std::shared_ptr<const ConstraintVocabulary>(std::move(vocab));
}

OutputConstraint::OutputConstraint(const ConstraintSpec& spec, std::vector<int32_t> stop_ids)
    : spec_(spec), stops_(stop_ids), matcher_(spec.grammar, spec.limits) {
  if (!spec.matched_prefix.empty() && !matcher_.AcceptBytes(spec.matched_prefix).ok()) {
    throw std::invalid_argument("OutputConstraint: the matched prefix is not the start of a sentence of the grammar");
  }
}

bool OutputConstraint::IsStop(int32_t id) const { return stops_.Contains(id); }

Status OutputConstraint::AllowedIds(grammar::TokenBitset* out) { return AllowedIds(out, -1); }

Status OutputConstraint::AllowedIds(grammar::TokenBitset* out, int64_t tokens_left) {
  if (ended_) {
    out->Reset(vocab().size());
    return Status::Ok();
  }
  if (tokens_left < 1) {  // no budget (or none given)
    NIELS_RETURN_IF_ERROR(matcher_.AllowedTokens(vocab(), out));
  } else {
    const auto after_this = static_cast<uint32_t>(std::min<int64_t>(tokens_left - 1, grammar::Matcher::kNoBound - 1));
    bool narrowed = false;
    NIELS_RETURN_IF_ERROR(matcher_.AllowedTokensWithin(vocab(), *spec_.vocabulary->after, after_this, out, &narrowed));
    budget_narrowed_ = budget_narrowed_ || narrowed;
  }
  // The matcher allows the vocabulary's end-of-output ids (the model's stop ids) where the text is
  // complete; the turn's own stop ids take their place.
  for (int32_t id : vocab().end_of_output_ids()) {
    if (!IsStop(id)) out->Clear(id);
  }
  if (matcher_.IsComplete()) {
    for (int32_t id : stops_.ids()) {
      if (id >= 0 && id < out->size()) out->Set(id);
    }
  }
  return Status::Ok();
}

Status OutputConstraint::Accept(int32_t id) {
  if (ended_) return Status::InvalidArgument(fmt::format("id {} after the constrained output ended", id));
  if (IsStop(id)) {
    if (!matcher_.IsComplete()) {
      return Status::InvalidArgument(fmt::format("stop id {} before the constrained output is complete", id));
    }
    ended_ = true;
    return Status::Ok();
  }
  const grammar::Vocabulary& v = vocab();
  NIELS_RETURN_IF_ERROR(matcher_.AcceptToken(id, v));
  const std::string& bytes = v.token(id).bytes;
  text_ += bytes;
  if (!bytes.empty()) at_start_ = false;
  return Status::Ok();
}

}  // namespace niels::daemon::engine
