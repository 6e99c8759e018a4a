#include "daemon/http/routes.h"

#include <fmt/format.h>

#include "daemon/http/anthropic_messages.h"
#include "daemon/http/metrics_api.h"
#include "daemon/http/models_api.h"
#include "daemon/http/openai_chat.h"
#include "daemon/http/openai_completions.h"
#include "daemon/http/tokenize_api.h"

namespace niels::daemon::http {

// The APIs (at namespace scope: Route's coroutine frame holds one).
enum class RoutedApi { kNone, kHealth, kMetrics, kModels, kChat, kCompletions, kMessages, kTokenize, kDetokenize };

namespace {

bool IsMessagesPath(std::string_view path) { return path == "/v1/messages" || path == "/messages"; }

}  // namespace

ErrorShape ErrorShapeOf(std::string_view target) {
  return IsMessagesPath(target.substr(0, target.find('?'))) ? ErrorShape::kAnthropic : ErrorShape::kOpenAi;
}

boost::asio::awaitable<const char*> Route(Exchange& exchange, Method method, std::string_view target,
                                          std::string_view body, RouteContext context) {
  const bool shutting_down = context.shutting_down;
  std::string_view path = target.substr(0, target.find('?'));
  const ErrorShape shape = ErrorShapeOf(path);
  if (shutting_down && path != "/health") {
    co_await exchange.RespondError(WithShape(MakeError(503, "nielsd is shutting down", "", "", 1), shape));
    co_return "other";
  }
  using Api = RoutedApi;
  Api api = Api::kNone;
  Method wanted = Method::kPost;
  if (path == "/health") {
    api = Api::kHealth;
    wanted = Method::kGet;
  } else if (path == "/metrics") {
    api = Api::kMetrics;
    wanted = Method::kGet;
  } else if (path == "/v1/models" || path == "/models") {
    api = Api::kModels;
    wanted = Method::kGet;
  } else if (path == "/v1/chat/completions" || path == "/chat/completions") {
    api = Api::kChat;
  } else if (path == "/v1/completions" || path == "/completions") {
    api = Api::kCompletions;
  } else if (IsMessagesPath(path)) {
    api = Api::kMessages;
  } else if (path == "/tokenize") {
    api = Api::kTokenize;
  } else if (path == "/detokenize") {
    api = Api::kDetokenize;
  }
  if (api == Api::kNone) {
    co_await exchange.RespondError(MakeError(404, fmt::format("no route {}", std::string(path.substr(0, 256))), "", "not_found"));
    co_return "other";
  }
  if (method != wanted) {
    const ApiError error = WithShape(
        MakeError(405, fmt::format("{} takes {} requests", std::string(path), wanted == Method::kGet ? "GET" : "POST")),
        shape);
    co_await exchange.RespondError(error);
    co_return "other";
  }
  const char* label = "other";
  switch (api) {
    case Api::kHealth:
      label = "health";
      exchange.SetEndpoint(label);
      co_await HandleHealth(exchange, shutting_down);
      break;
    case Api::kMetrics:
      label = "metrics";
      exchange.SetEndpoint(label);
      co_await HandleMetrics(exchange, *context.counters, context.http_connections);
      break;
    case Api::kModels:
      label = "models";
      exchange.SetEndpoint(label);
      co_await HandleModels(exchange);
      break;
    case Api::kChat:
      label = "chat_completions";
      exchange.SetEndpoint(label);
      co_await HandleChatCompletion(exchange, body, context.session_header);
      break;
    case Api::kCompletions:
      label = "completions";
      exchange.SetEndpoint(label);
      co_await HandleCompletion(exchange, body, context.session_header);
      break;
    case Api::kMessages:
      label = "messages";
      exchange.SetEndpoint(label);
      co_await HandleMessages(exchange, body, context.session_header);
      break;
    case Api::kTokenize:
      label = "tokenize";
      exchange.SetEndpoint(label);
      co_await HandleTokenize(exchange, body);
      break;
    case Api::kDetokenize:
      label = "detokenize";
      exchange.SetEndpoint(label);
      co_await HandleDetokenize(exchange, body);
      break;
    case Api::kNone:
      break;
  }
  co_return label;
}

}  // namespace niels::daemon::http
