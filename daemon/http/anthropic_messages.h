#pragma once
// POST /v1/messages (Anthropic's Messages API) on nielsd's Chat, the same native requests the OpenAI
// chat mapping (openai_chat.h) makes.
//
// Stateless, as the API is: each request creates an ephemeral session of the caller (`system` its
// system prompt, `tools` its tools), sends one Chat with the conversation, and deletes the session
// after; the per-uid prefix index serves a re-sent conversation's prefix from the KV pool
// (usage.cache_read_input_tokens). Messages map onto ChatMessages:
//   - a user message's text blocks (joined by a blank line) are one "user" message; each
//     tool_result block is a "tool" message (tool_call_id = tool_use_id, its name from the tool_use
//     block of that id earlier in the conversation), in the order of the blocks;
//   - an assistant message's text blocks are its content, its thinking blocks its reasoning, its
//     tool_use blocks its tool_calls (arguments: `input` as JSON text); redacted_thinking is dropped.
// A conversation of one user message of (non-empty) text is sent as ChatRequest.user_text; others
// as ChatRequest.messages. Errors are in Anthropic's shape (api_error.h).
//
// MapMessages is the pure edge (JSON -> native requests), fuzzed with the HTTP parser
// (tests/fuzz/http_request_fuzz.cc); HandleMessages runs a request through an Exchange.

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "daemon/http/exchange.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::http {

struct MessagesPlan {
  niels::v1::CreateSessionRequest create;  // system prompt and tools
  niels::v1::ChatRequest chat;             // everything else (session_id set when run)
  bool stream = false;
  // The durable session the request runs on (bound_session.h), instead of an ephemeral one.
  std::optional<std::string> session;
};

// Maps a request body onto native requests; the 400 (or 404 for an unknown model) naming the field
// at fault otherwise, with shape kAnthropic. Fields: model (required: the loaded model's id or
// "default"), max_tokens (required, >= 1), messages (required, roles user and assistant; content a
// string or blocks of type text, tool_use, tool_result, thinking, redacted_thinking), system (a
// string or text blocks), tools (custom tools: name, description, input_schema), tool_choice (type
// auto, any, tool with name, none), stop_sequences, temperature ([0, 1], default 1), top_p, top_k,
// thinking (type enabled/adaptive -> enable_thinking true, disabled -> false; budget_tokens is read
// but not a bound), stream, nielsd_session (with `session_header`, the X-Nielsd-Session header:
// bound_session.h). Others are ignored.
std::optional<ApiError> MapMessages(const nlohmann::json& body, const ModelView& model, MessagesPlan* plan,
                                    std::optional<std::string_view> session_header = std::nullopt);

// `session_header`: the request's X-Nielsd-Session header, if any.
boost::asio::awaitable<void> HandleMessages(Exchange& exchange, std::string_view body,
                                            std::optional<std::string_view> session_header = std::nullopt);

}  // namespace niels::daemon::http
