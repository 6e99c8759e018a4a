#pragma once
// Conversions between the wire messages (niels.v1) and the engine's typed values, shared by the
// request handlers. Pure functions; any thread.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/budgets.h"
#include "common/status.h"
#include "daemon/engine/generator.h"
#include "daemon/sessions/session.h"
#include "daemon/sessions/session_registry.h"
#include "daemon/sampling/sampler.h"
#include "daemon/text/tokenizer.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::handlers {

// Bounds of per-request values.
inline constexpr int32_t kMaxNewTokensLimit = 1 << 16;  // a sane upper bound; T stops earlier anyway
// top_logprobs and sampled_top_logprobs per step (budget step_alternatives); their sum times
// max_new_tokens within budget step_alternative_entries (CheckStepAlternatives).
inline constexpr int32_t kMaxTopLogprobs = static_cast<int32_t>(common::kStepAlternativesLimit);
// The longest GenerateRequest.stop_ids list (repeats counted). Every sampled id is looked up in the
// stop ids (a set built once per request, O(log n) per lookup), and with a constraint every stop id
// is checked against the banned ids once.
inline constexpr size_t kMaxStopIds = common::kStopIdsLimit;
// Sampling.banned_ids holds at most the model's vocabulary size (ModelConfig::vocab_size, the
// output rows) of ids, repeats counted: no list needs more, and so the banned ids cost at most
// O(V) per request to validate and make distinct, and O(V) per step (SamplingParams, Sampler).
// Texts the engine thread encodes or decodes for a request, bounded so that one request's share of
// an iteration stays small (about 0.15 s of encoding at the demo model's ~1.2 us per byte):
// Tokenize text, a CreateSession system prompt and a Chat turn's user text at most 128 KiB (about 32k tokens of English), a
// Detokenize at most 65536 ids (more than the context of every supported model). INVALID_ARGUMENT
// beyond, naming the limit.
inline constexpr size_t kMaxTokenizeTextBytes = common::kTokenizeTextBytesLimit;
inline constexpr size_t kMaxSystemPromptBytes = common::kSystemPromptBytesLimit;
inline constexpr size_t kMaxUserTextBytes = common::kUserTextBytesLimit;
inline constexpr size_t kMaxDetokenizeIds = common::kDetokenizeIdsLimit;

// Sampling.logit_bias likewise holds at most the vocabulary size of entries (budget logit_bias),
// each id once: it costs O(n log n) once per request to validate and sort, and O(n) per step
// (one addition per entry to the row's copy the sampler makes anyway).
// Sampling with the defaults of common/defaults.h for unset fields, banned = sampling.banned_ids +
// the ids biased by -inf + `default_banned` unless allow_special_tokens, distinct and ascending;
// logit_bias ascending by id. INVALID_ARGUMENT (naming the field) when out of range for
// `vocab_size`, for more than `vocab_size` sampling.banned_ids ("sampling.banned_ids: 200000 ids
// (the limit is the vocabulary size, 151936)") or sampling.logit_bias entries, and for a bad
// logit_bias entry (sampling::ValidateLogitBias: "sampling.logit_bias[3]: ..."). Cost O(V + the
// ids given + n log n for n bias entries).
common::StatusOr<sampling::SamplingParams> SamplingFromProto(const niels::v1::Sampling& sampling,
                                                          int64_t vocab_size,
                                                          std::span<const int32_t> default_banned);

// INVALID_ARGUMENT naming `what` and the first id outside [0, vocab_size).
common::Status CheckIds(std::span<const int32_t> ids, int64_t vocab_size, const char* what);

// A request's stop ids: INVALID_ARGUMENT for more than kMaxStopIds ("stop_ids: 65 ids (the limit is
// 64)"), or as CheckIds(ids, vocab_size, "stop_ids").
common::Status CheckStopIds(std::span<const int32_t> ids, int64_t vocab_size);

// A request's stop strings as the engine takes them: INVALID_ARGUMENT for more than
// common::kStopStringsLimit (budget stop_strings), an empty one, or one longer than
// common::kStopStringBytesLimit bytes (budget stop_string_bytes), naming its index.
common::StatusOr<std::vector<std::string>> StopStringsFromProto(
    const google::protobuf::RepeatedPtrField<std::string>& stops);

niels::v1::StopReason StopReasonToProto(engine::StopReason reason);

niels::v1::GenerationStats StatsToProto(const engine::GenerateResult& result, double queue_ms);

// Fills `info` with the session's public description.
void FillSessionInfo(const sessions::SessionView& view, niels::v1::SessionInfo& info);

// top_logprobs and sampled_top_logprobs of a Generate or Chat: each in [0, kMaxTopLogprobs]
// (INVALID_ARGUMENT naming the field, budget step_alternatives), and the entries their steps hold,
// (top_logprobs + sampled_top_logprobs) x max_new_tokens, within budget step_alternative_entries
// (RESOURCE_EXHAUSTED naming top_logprobs).
common::Status CheckStepAlternatives(int32_t top_logprobs, int32_t sampled_top_logprobs, int64_t max_new_tokens);

// A StepInfo from a generator step event: id, logprob, top alternatives with their pieces, and the
// attention row [H, length] flattened row-major.
niels::v1::StepInfo StepToProto(const engine::StepEvent& event, const text::Tokenizer& tokenizer,
                                bool with_text_bytes = false);
// (with_text_bytes: StepInfo.text_bytes and each alternative's, the bytes the id adds to the text,
// Tokenizer::Bytes: `at_start` for the output's first step, else `bytes`; Chat sets it.)

}  // namespace niels::daemon::handlers
