#pragma once
// ApiError: an HTTP API's answer to a request it refuses, and the one mapping of nielsd's status
// codes to HTTP statuses. The OpenAI-shaped APIs answer their errors in OpenAI's error shape
// ({"error": {"message", "type", "param", "code"}}), which llama.cpp's server and vLLM also use;
// Anthropic's /v1/messages in Anthropic's ({"type": "error", "error": {"type", "message"}}). The
// status is the same either way; only the body's shape and its type names differ.
//
// Pure functions; thread-safe.

#include <cstdint>
#include <string>

#include "common/status.h"

namespace niels::daemon::http {

// Which API's JSON error body an error is written in.
enum class ErrorShape { kOpenAi, kAnthropic };

struct ApiError {
  unsigned status = 400;   // HTTP status
  std::string message;
  std::string param;       // the request field at fault ("" = none)
  std::string code;        // a machine-readable code ("" = none): "model_not_found", ...
  // Retry-After seconds for a 429 or 503 (0 = no header).
  uint32_t retry_after_s = 0;
  ErrorShape shape = ErrorShape::kOpenAi;
};

inline ApiError MakeError(unsigned status, std::string message, std::string param = "", std::string code = "",
                          uint32_t retry_after_s = 0) {
  ApiError error;
  error.status = status;
  error.message = std::move(message);
  error.param = std::move(param);
  error.code = std::move(code);
  error.retry_after_s = retry_after_s;
  return error;
}

// 400 naming `param`.
ApiError BadField(const std::string& param, const std::string& message);

// nielsd's status -> HTTP: INVALID_ARGUMENT 400, NOT_FOUND 404, PERMISSION_DENIED 403,
// RESOURCE_EXHAUSTED 429 (Retry-After: 1), CANCELLED 499, UNAVAILABLE 503 (Retry-After: 1),
// UNIMPLEMENTED 501, INTERNAL and anything else 500. The message is nielsd's.
ApiError FromStatus(const common::Status& status);

// OpenAI's "type" for an HTTP status ("invalid_request_error", "not_found_error", ...).
const char* ErrorType(unsigned status);

// Anthropic's "type" for an HTTP status: 400 (and other 4xx) "invalid_request_error", 401
// "authentication_error", 403 "permission_error", 404 "not_found_error", 413 "request_too_large",
// 429 "rate_limit_error", 503 "overloaded_error", 500 and other 5xx "api_error".
const char* AnthropicErrorType(unsigned status);

// The JSON body of an error in its shape: OpenAI's {"error": {"message", "type", "param", "code"}}
// (param and code null when empty), or Anthropic's {"type": "error", "error": {"type", "message"}}
// (the message names the field at fault, as every FieldReader message does).
std::string ErrorBody(const ApiError& error);

// The same error in another shape.
inline ApiError WithShape(ApiError error, ErrorShape shape) {
  error.shape = shape;
  return error;
}

}  // namespace niels::daemon::http
