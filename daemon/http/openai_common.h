#pragma once
// What OpenAI's chat completions and completions APIs share: the model check, sampling with
// OpenAI's defaults, stop strings, stream options, finish reasons, usage, and response ids.
//
// Pure functions; thread-safe.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/http/exchange.h"
#include "daemon/http/json_fields.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::http {

// The alias every request may use instead of the model's id.
inline constexpr const char* kModelAlias = "default";

// `model`, when given, must be the loaded model's id or kModelAlias: otherwise a 404
// "model_not_found" (recorded in the reader's error).
void ReadModel(FieldReader& fields, const ModelView& model);

// temperature ([0, 2], default 1), top_p ([0, 1], default off = 1), seed; top_k is off (OpenAI has
// none), no repetition penalty.
void ReadSampling(FieldReader& fields, niels::v1::Sampling* sampling);

// `logit_bias` (OpenAI's): an object of token ids as decimal strings to numbers in [-100, 100] ->
// Sampling.logit_bias, added to the raw logits (-100 is a bias of -100, not a ban). A key that is
// not an id of the vocabulary (`model.vocab_size`, when known), two keys of one id ("7", "07"), or a
// value that is not such a number is a 400 naming `logit_bias` and the key.
void ReadLogitBias(FieldReader& fields, const ModelView& model, niels::v1::Sampling* sampling);

// `stop`: a string or an array of strings -> stop_strings.
void ReadStop(FieldReader& fields, google::protobuf::RepeatedPtrField<std::string>* stop_strings);

// `stream` and `stream_options.include_usage`.
struct StreamOptions {
  bool stream = false;
  bool include_usage = false;
};
StreamOptions ReadStream(FieldReader& fields);

// "stop" (a stop token or string), "length" (max tokens, the context, or a constraint cut short),
// "tool_calls".
const char* FinishReason(niels::v1::StopReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}.
nlohmann::json Usage(const niels::v1::GenerationStats& stats);

// "<prefix>-" and 24 random hex digits.
std::string NewResponseId(const char* prefix);
// Seconds since the epoch.
int64_t UnixNow();

// Dumps a response value as compact JSON (invalid UTF-8 replaced: a model may split a character).
std::string Dump(const nlohmann::json& value);

}  // namespace niels::daemon::http
