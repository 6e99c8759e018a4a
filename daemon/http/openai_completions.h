#pragma once
// POST /v1/completions (OpenAI's legacy completions API) on nielsd's raw Generate path: the prompt
// (text, tokenized with the model's special tokens such as BOS, or token ids) is appended to a fresh
// ephemeral session of the caller and continued; the session is deleted after.
//
// MapCompletion is the pure edge (JSON -> native requests, fuzzed); HandleCompletion runs it.

#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "daemon/http/exchange.h"
#include "daemon/http/openai_common.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::http {

// The OpenAI default of max_tokens on completions.
inline constexpr int32_t kDefaultCompletionTokens = 16;

struct CompletionPlan {
  std::optional<std::string> prompt_text;  // tokenized first when set; else generate.input_ids
  niels::v1::GenerateRequest generate;     // session_id set when run
  StreamOptions stream;
  bool logprobs = false;
};

// Fields: model, prompt (a string, token ids, or a one-element array of either), max_tokens (default
// 16), temperature, top_p, seed, stop, logprobs (0-20 alternatives per token), stream,
// stream_options.include_usage. n, best_of other than 1, echo and suffix are refused; others ignored.
std::optional<ApiError> MapCompletion(const nlohmann::json& body, const ModelView& model, CompletionPlan* plan);

boost::asio::awaitable<void> HandleCompletion(Exchange& exchange, std::string_view body);

}  // namespace niels::daemon::http
