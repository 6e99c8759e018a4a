#pragma once
// POST /v1/chat/completions (OpenAI's chat completions API) on nielsd's Chat.
//
// Stateless, as the API is: each request creates an ephemeral session of the caller (the leading
// system/developer messages become its system prompt, `tools` its tools), sends one Chat with the
// rest of the conversation, and deletes the session after. The KV pool's per-uid prefix index makes
// the re-sent prefix of a conversation cost no prefill (usage.prompt_tokens_details.cached_tokens).
// A conversation of one user message after the system prompt is sent as ChatRequest.user_text;
// longer ones as ChatRequest.messages.
//
// n choices are n such sessions and n Chats, run as one call (Exchange::CallAll): the first alone
// until its prompt is prefilled (its first token), then the others, which find the prompt's whole
// blocks in the prefix index and prefill only the rest (at most a block, and the last position).
// They are n native requests of the caller, so each counts against the caller's session, queue and
// running quotas: n cannot get more than n requests would.
//
// With `nielsd_session` (or the X-Nielsd-Session header) the request runs on that durable session of
// the caller instead (bound_session.h): its conversation replaces the session's, reusing what the
// session holds; n > 1 is refused there (a session holds one conversation).
//
// MapChatCompletion is the pure edge (JSON -> native requests), fuzzed with the HTTP parser
// (tests/fuzz/http_request_fuzz.cc); HandleChatCompletion runs a request through an Exchange.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "daemon/http/exchange.h"
#include "daemon/http/openai_common.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::http {

struct ChatPlan {
  niels::v1::CreateSessionRequest create;  // system prompt and tools
  niels::v1::ChatRequest chat;             // everything else (session_id set when run)
  StreamOptions stream;
  int32_t n = 1;  // choices, [1, kMaxChoices]
  // The durable session the request runs on (bound_session.h), instead of ephemeral ones; n is 1.
  std::optional<std::string> session;
};

// The most choices (`n`) one request may ask for.
inline constexpr int32_t kMaxChoices = 8;

// The Chat of choice `index` of a plan: plan.chat, with the seed `seed + index` when the request
// gave one (the engine's default seed, common::kDefaultSeed, standing for it when not), so each
// choice samples on its own and choice i of a seeded request is the answer of n = 1 with seed + i.
// With n = 1 the Chat is plan.chat unchanged.
niels::v1::ChatRequest ChoiceChat(const ChatPlan& plan, int32_t index);

// Maps a request body onto native requests; the 400 (or 404 for an unknown model) naming the field
// at fault otherwise. Fields: model, messages (system, developer, user, assistant with tool_calls and
// reasoning_content, tool), tools, tool_choice, response_format (text, json_object, json_schema),
// max_completion_tokens / max_tokens (default: the model's context), temperature, top_p, seed, stop,
// stream, stream_options.include_usage, n (1 to kMaxChoices), chat_template_kwargs.enable_thinking,
// nielsd_session (with `session_header`, the X-Nielsd-Session header: bound_session.h; n must then
// be 1). Others are ignored.
std::optional<ApiError> MapChatCompletion(const nlohmann::json& body, const ModelView& model, ChatPlan* plan,
                                          std::optional<std::string_view> session_header = std::nullopt);

// `session_header`: the request's X-Nielsd-Session header, if any.
boost::asio::awaitable<void> HandleChatCompletion(Exchange& exchange, std::string_view body,
                                                  std::optional<std::string_view> session_header = std::nullopt);

}  // namespace niels::daemon::http
