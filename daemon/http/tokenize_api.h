#pragma once
// POST /tokenize and POST /detokenize, in llama.cpp's server shape:
//   /tokenize   {"content": "text", "add_special": false, "parse_special": false} -> {"tokens": [ids]}
//   /detokenize {"tokens": [ids]} -> {"content": "text"}
// On nielsd's Tokenize and Detokenize (their budgets apply).

#include <optional>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "daemon/http/exchange.h"

namespace niels::daemon::http {

// Pure edges (fuzzed).
std::optional<ApiError> MapTokenize(const nlohmann::json& body, niels::v1::TokenizeRequest* request);
std::optional<ApiError> MapDetokenize(const nlohmann::json& body, niels::v1::DetokenizeRequest* request);

boost::asio::awaitable<void> HandleTokenize(Exchange& exchange, std::string_view body);
boost::asio::awaitable<void> HandleDetokenize(Exchange& exchange, std::string_view body);

}  // namespace niels::daemon::http
