#include "daemon/handlers/proto_convert.h"

#include <algorithm>

#include <fmt/format.h>

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;
using engine::StepEvent;
using engine::StopReason;
using engine::TokenAlternative;

common::StatusOr<sampling::SamplingParams> SamplingFromProto(const v1::Sampling& sampling, int64_t vocab_size,
                                                          std::span<const int32_t> default_banned) {
  sampling::SamplingParams params;  // common/defaults.h
  if (sampling.has_temperature()) params.temperature = sampling.temperature();
  if (sampling.has_top_k()) params.top_k = sampling.top_k();
  if (sampling.has_top_p()) params.top_p = sampling.top_p();
  if (sampling.has_repetition_penalty()) params.repetition_penalty = sampling.repetition_penalty();
  if (sampling.has_seed()) params.seed = sampling.seed();
  const auto& requested = sampling.banned_ids();
  if (static_cast<int64_t>(requested.size()) > vocab_size) {
    return common::Refuse(common::BudgetId::kBannedIds, fmt::format("sampling.banned_ids: {} ids (the limit is the vocabulary size, {})",
                                               requested.size(), vocab_size));
  }
  params.banned_ids.assign(requested.begin(), requested.end());
  const auto& bias = sampling.logit_bias();
  if (static_cast<int64_t>(bias.size()) > vocab_size) {
    return common::Refuse(common::BudgetId::kLogitBias,
                          fmt::format("sampling.logit_bias: {} entries (the limit is the vocabulary size, {})",
                                      bias.size(), vocab_size));
  }
  params.logit_bias.reserve(static_cast<size_t>(bias.size()));
  for (const v1::TokenBias& entry : bias) params.logit_bias.push_back({entry.id(), entry.bias()});
  NIELS_RETURN_IF_ERROR(sampling::ValidateLogitBias(params.logit_bias, vocab_size, "sampling.logit_bias"));
  // Ascending ids (each once, as validated); a -inf bias bans its id.
  std::sort(params.logit_bias.begin(), params.logit_bias.end(),
            [](const sampling::TokenBias& a, const sampling::TokenBias& b) { return a.id < b.id; });
  const std::vector<int32_t> banned_by_bias = sampling::BannedByBias(params.logit_bias);
  params.banned_ids.insert(params.banned_ids.end(), banned_by_bias.begin(), banned_by_bias.end());
  if (!sampling.allow_special_tokens()) {
    params.banned_ids.insert(params.banned_ids.end(), default_banned.begin(), default_banned.end());
  }
  NIELS_RETURN_IF_ERROR(sampling::ValidateSamplingParams(params, vocab_size));
  // Distinct and ascending, in one pass over the ids and one over the vocabulary (every id is in
  // [0, vocab_size) now).
  if (params.banned_ids.empty()) return params;
  std::vector<bool> banned(static_cast<size_t>(vocab_size), false);
  for (int32_t id : params.banned_ids) banned[id] = true;
  params.banned_ids.clear();
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (banned[id]) params.banned_ids.push_back(id);
  }
  return params;
}

Status CheckIds(std::span<const int32_t> ids, int64_t vocab_size, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return Status::InvalidArgument(
          fmt::format("{}[{}] = {} is outside the vocabulary [0, {})", what, i, ids[i], vocab_size));
    }
  }
  return Status::Ok();
}

common::StatusOr<std::vector<std::string>> StopStringsFromProto(
    const google::protobuf::RepeatedPtrField<std::string>& stops) {
  if (static_cast<size_t>(stops.size()) > common::kStopStringsLimit) {
    return common::Refuse(common::BudgetId::kStopStrings, fmt::format("stop_strings: {} strings (the limit is {})",
                                                                      stops.size(), common::kStopStringsLimit));
  }
  std::vector<std::string> out;
  for (int i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) return Status::InvalidArgument(fmt::format("stop_strings[{}] is empty", i));
    if (stops[i].size() > common::kStopStringBytesLimit) {
      return common::Refuse(common::BudgetId::kStopStringBytes,
                            fmt::format("stop_strings[{}] is {} bytes (the limit is {})", i, stops[i].size(),
                                        common::kStopStringBytesLimit));
    }
    out.push_back(stops[i]);
  }
  return out;
}

Status CheckStopIds(std::span<const int32_t> ids, int64_t vocab_size) {
  if (ids.size() > kMaxStopIds) {
    return common::Refuse(common::BudgetId::kStopIds,
                          fmt::format("stop_ids: {} ids (the limit is {})", ids.size(), kMaxStopIds));
  }
  return CheckIds(ids, vocab_size, "stop_ids");
}

v1::StopReason StopReasonToProto(StopReason reason) {
  switch (reason) {
    case StopReason::kStopToken: return v1::EOT;
    case StopReason::kMaxTokens: return v1::MAX_TOKENS;
    case StopReason::kContextFull: return v1::CONTEXT_FULL;
    case StopReason::kCancelled: return v1::STOP_CANCELLED;
    case StopReason::kConstraintIncomplete: return v1::CONSTRAINT_INCOMPLETE;
    case StopReason::kStopString: return v1::STOP_STRING;
    case StopReason::kStopped: return v1::STOPPED;
    case StopReason::kFailed: break;  // a failed turn is answered with its error
  }
  return v1::STOP_REASON_UNSPECIFIED;
}

v1::GenerationStats StatsToProto(const engine::GenerateResult& result, double queue_ms) {
  v1::GenerationStats stats;
  stats.set_prompt_tokens(result.prompt_tokens);
  stats.set_reused_tokens(result.reused_tokens);
  stats.set_prefilled_tokens(result.prefilled_tokens);
  stats.set_generated_tokens(static_cast<int64_t>(result.new_tokens.size()));
  stats.set_time_to_first_token_ms(result.time_to_first_token_s * 1000.0);
  stats.set_decode_tokens_per_s(result.decode_tokens_per_s);
  stats.set_used_kv_cache(result.used_kv_cache);
  stats.set_queue_ms(queue_ms);
  stats.set_constraint_forced_end(result.constraint_forced_end);
  return stats;
}

void FillSessionInfo(const sessions::SessionView& view, v1::SessionInfo& info) {
  info.set_session_id(view.id);
  info.set_length(view.length);
  info.set_cached_tokens(view.cached_tokens);
  info.set_kv_bytes(view.kv_bytes);
  info.set_kv_own_blocks(view.kv_own_blocks);
  info.set_kv_shared_blocks(view.kv_shared_blocks);
  info.set_turns(view.turns);
  info.set_has_system_prompt(view.has_system_prompt);
  info.set_system_prompt_text(view.system_prompt_text);
  info.set_created_unix_s(view.created_unix_s);
  info.set_last_used_unix_s(view.last_used_unix_s);
  info.set_other_model(view.other_model);
  info.set_model_name(view.model_name);
}

common::Status CheckStepAlternatives(int32_t top_logprobs, int32_t sampled_top_logprobs, int64_t max_new_tokens) {
  for (const auto& [name, n] : {std::pair<const char*, int32_t>{"top_logprobs", top_logprobs},
                                {"sampled_top_logprobs", sampled_top_logprobs}}) {
    if (n < 0 || n > kMaxTopLogprobs) {
      return common::Refuse(common::BudgetId::kStepAlternatives,
                            fmt::format("{} = {} must be in [0, {}]", name, n, kMaxTopLogprobs));
    }
  }
  const uint64_t entries = (static_cast<uint64_t>(top_logprobs) + static_cast<uint64_t>(sampled_top_logprobs)) *
                           static_cast<uint64_t>(std::max<int64_t>(max_new_tokens, 0));
  const uint64_t allowed = common::Allowance(common::BudgetId::kStepAlternativeEntries, 0, 0);
  if (entries > allowed) {
    return common::Refuse(common::BudgetId::kStepAlternativeEntries,
                          fmt::format("top_logprobs: (top_logprobs {} + sampled_top_logprobs {}) x max_new_tokens {} "
                                      "= {} alternatives (the limit is {})",
                                      top_logprobs, sampled_top_logprobs, max_new_tokens, entries, allowed));
  }
  return common::Status::Ok();
}

v1::StepInfo StepToProto(const StepEvent& event, const text::Tokenizer& tokenizer, bool with_text_bytes) {
  const auto text_bytes = [&tokenizer, at_start = event.index == 0](int32_t id) {
    text::TextBytes bytes = tokenizer.Bytes(id);
    return at_start ? std::move(bytes.at_start) : std::move(bytes.bytes);
  };
  v1::StepInfo step;
  step.set_id(event.id);
  if (event.logprob) step.set_logprob(*event.logprob);
  if (with_text_bytes) step.set_text_bytes(text_bytes(event.id));
  const auto add = [&](const TokenAlternative& alternative, v1::TokenAlternative* to) {
    to->set_id(alternative.id);
    to->set_logprob(alternative.logprob);
    to->set_piece(tokenizer.Piece(alternative.id));
    if (with_text_bytes) to->set_text_bytes(text_bytes(alternative.id));
  };
  for (const TokenAlternative& alternative : event.top) add(alternative, step.add_top());
  for (const TokenAlternative& alternative : event.sampled_top) add(alternative, step.add_sampled_top());
  if (event.sampled_logprob) step.set_sampled_logprob(*event.sampled_logprob);
  if (event.attention) {
    const engine::AttentionRow& row = *event.attention;  // [H, length]
    step.mutable_attention()->Add(row.probs.begin(), row.probs.end());
    step.set_attention_heads(static_cast<int32_t>(row.heads));
    step.set_attention_length(static_cast<int32_t>(row.length));
  }
  return step;
}

}  // namespace niels::daemon::handlers
