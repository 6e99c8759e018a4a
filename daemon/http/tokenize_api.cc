#include "daemon/http/tokenize_api.h"

#include <fmt/format.h>

#include "common/wire_status.h"
#include "daemon/http/json_fields.h"
#include "daemon/http/openai_common.h"

namespace niels::daemon::http {

using nlohmann::json;

std::optional<ApiError> MapTokenize(const json& body, niels::v1::TokenizeRequest* request) {
  std::optional<ApiError> error;
  FieldReader fields(body, "", &error);
  std::optional<std::string> content = fields.String("content");
  if (!content && !fields.failed()) fields.Fail("content", "is required");
  request->set_text(content.value_or(""));
  request->set_add_special(fields.Bool("add_special").value_or(false));
  request->set_parse_special(fields.Bool("parse_special").value_or(false));
  return error;
}

std::optional<ApiError> MapDetokenize(const json& body, niels::v1::DetokenizeRequest* request) {
  std::optional<ApiError> error;
  FieldReader fields(body, "", &error);
  const json* tokens = fields.Array("tokens");
  if (tokens == nullptr) {
    if (!fields.failed()) fields.Fail("tokens", "is required");
    return error;
  }
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& id = (*tokens)[i];
    if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
      fields.Fail(fmt::format("tokens[{}]", i), "must be a token id (an integer)");
      return error;
    }
    request->add_ids(static_cast<int32_t>(id.get<int64_t>()));
  }
  return error;
}

namespace {

std::string TokensBody(const niels::v1::TokenizeResponse& tokenize) {
  return Dump({{"tokens", std::vector<int32_t>(tokenize.ids().begin(), tokenize.ids().end())}});
}

std::string ContentBody(const niels::v1::DetokenizeResponse& detokenize) {
  return Dump({{"content", detokenize.text()}});
}

boost::asio::awaitable<void> Run(Exchange& exchange, niels::v1::Request request) {
  niels::v1::Response response = co_await exchange.Call(std::move(request));
  if (response.has_error()) {
    co_await exchange.RespondError(FromStatus(common::FromProto(response.error())));
  } else if (response.has_tokenize()) {
    co_await exchange.Respond(200, TokensBody(response.tokenize()));
  } else {
    co_await exchange.Respond(200, ContentBody(response.detokenize()));
  }
}

}  // namespace

boost::asio::awaitable<void> HandleTokenize(Exchange& exchange, std::string_view body) {
  json parsed;
  niels::v1::Request request;
  std::optional<ApiError> error = ParseRequestBody(body, &parsed);
  if (!error) error = MapTokenize(parsed, request.mutable_tokenize());
  if (error) {
    co_await exchange.RespondError(*error);
    co_return;
  }
  co_await Run(exchange, std::move(request));
}

boost::asio::awaitable<void> HandleDetokenize(Exchange& exchange, std::string_view body) {
  json parsed;
  niels::v1::Request request;
  std::optional<ApiError> error = ParseRequestBody(body, &parsed);
  if (!error) error = MapDetokenize(parsed, request.mutable_detokenize());
  if (error) {
    co_await exchange.RespondError(*error);
    co_return;
  }
  co_await Run(exchange, std::move(request));
}

}  // namespace niels::daemon::http
