#pragma once
// The HTTP front's routes: method and path -> the API that answers. Unknown paths are 404, a known
// path with another method 405, both in OpenAI's error shape.
//   GET  /health                              models_api.h
//   GET  /metrics                             metrics_api.h
//   GET  /v1/models (and /models)             models_api.h
//   POST /v1/chat/completions (/chat/completions)  openai_chat.h
//   POST /v1/completions (/completions)       openai_completions.h
//   POST /v1/messages (/messages)             anthropic_messages.h
//   POST /tokenize, POST /detokenize          tokenize_api.h
// A query string is ignored. Errors about a request for /v1/messages (its 404, 405, 503, and the
// connection's 400, 408 and 413 once its head is read) are in Anthropic's error shape.


#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>

#include "daemon/http/exchange.h"
#include "daemon/http/http_counters.h"

namespace niels::daemon::http {

enum class Method { kGet, kPost, kOther };

// What a route may need of the front.
struct RouteContext {
  bool shutting_down = false;
  const HttpCounters* counters = nullptr;  // for /metrics
  size_t http_connections = 0;             // for /metrics
  // The X-Nielsd-Session header (repeated ones joined by ", "), for the APIs that run on a session.
  std::optional<std::string> session_header;
};

// The error shape of the API at `target` (a request target; its query string is ignored).
ErrorShape ErrorShapeOf(std::string_view target);

// Answers the request; returns the endpoint's label for the request counters ("chat_completions",
// "completions", "messages", "models", "health", "metrics", "tokenize", "detokenize", "other").
boost::asio::awaitable<const char*> Route(Exchange& exchange, Method method, std::string_view target,
                                          std::string_view body, RouteContext context);

}  // namespace niels::daemon::http
