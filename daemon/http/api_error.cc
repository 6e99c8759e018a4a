#include "daemon/http/api_error.h"

#include <nlohmann/json.hpp>

namespace niels::daemon::http {

ApiError BadField(const std::string& param, const std::string& message) {
  return MakeError(400, message, param);
}

ApiError FromStatus(const common::Status& status) {
  ApiError error;
  error.message = status.message();
  switch (status.code()) {
    case common::StatusCode::kInvalidArgument: error.status = 400; break;
    case common::StatusCode::kNotFound: error.status = 404; break;
    case common::StatusCode::kPermissionDenied: error.status = 403; break;
    case common::StatusCode::kResourceExhausted:
      error.status = 429;
      error.code = "rate_limit_exceeded";
      error.retry_after_s = 1;
      break;
    case common::StatusCode::kCancelled: error.status = 499; break;
    case common::StatusCode::kUnavailable:
      error.status = 503;
      error.retry_after_s = 1;
      break;
    case common::StatusCode::kUnimplemented: error.status = 501; break;
    default: error.status = 500; break;
  }
  return error;
}

const char* ErrorType(unsigned status) {
  switch (status) {
    case 400: case 413: case 431: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 429: return "rate_limit_error";
    case 499: return "cancelled";
    case 501: return "not_implemented_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

const char* AnthropicErrorType(unsigned status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string ErrorBody(const ApiError& error) {
  if (error.shape == ErrorShape::kAnthropic) {
    const nlohmann::json body = {{"type", "error"},
                                 {"error", {{"type", AnthropicErrorType(error.status)}, {"message", error.message}}}};
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  nlohmann::json inner = {{"message", error.message},
                          {"type", ErrorType(error.status)},
                          {"param", error.param.empty() ? nlohmann::json() : nlohmann::json(error.param)},
                          {"code", error.code.empty() ? nlohmann::json() : nlohmann::json(error.code)}};
  return nlohmann::json{{"error", std::move(inner)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace niels::daemon::http
