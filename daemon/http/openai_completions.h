#pragma once
// POST /v1/completions (OpenAI's legacy completions API) on nielsd's raw Generate path: the prompt
// (text, tokenized with the model's special tokens such as BOS, or token ids) is appended to a fresh
// ephemeral session of the caller and continued; the session is deleted after. With nielsd_session
// (or the X-Nielsd-Session header) the prompt continues that durable session instead
// (bound_session.h).
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
  // The durable session the request runs on (bound_session.h): the prompt is appended to its tokens
  // (a text prompt gets the model's BOS only when the session is empty) and the completion stays.
  std::optional<std::string> session;
};

// Fields: model, prompt (a string, token ids, or a one-element array of either), max_tokens (default
// 16), temperature, top_p, seed, stop, logprobs (0-20 alternatives per token), stream,
// stream_options.include_usage, nielsd_session (with `session_header`, the X-Nielsd-Session header:
// bound_session.h). n, best_of other than 1, echo and suffix are refused; others ignored.
std::optional<ApiError> MapCompletion(const nlohmann::json& body, const ModelView& model, CompletionPlan* plan,
                                      std::optional<std::string_view> session_header = std::nullopt);

// `session_header`: the request's X-Nielsd-Session header, if any.
boost::asio::awaitable<void> HandleCompletion(Exchange& exchange, std::string_view body,
                                              std::optional<std::string_view> session_header = std::nullopt);

}  // namespace niels::daemon::http
