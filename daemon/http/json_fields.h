#pragma once
// FieldReader: typed access to the fields of a JSON request object, with the errors the
// OpenAI-compatible servers give: null is the same as absent, an unknown field is ignored, a field
// of the wrong type or out of range is a 400 naming it ("messages[2].content"). The first error is
// kept; later reads return nullopt.
//
// ParseRequestBody: the body of a POST as one JSON object (bounded nesting, common/bounded_json.h);
// invalid JSON (invalid UTF-8 included) or anything but an object is a 400.
//
// Not thread-safe (one request's reader).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/http/api_error.h"

namespace niels::daemon::http {

// The body as a JSON object, or the 400 saying why not.
std::optional<ApiError> ParseRequestBody(std::string_view body, nlohmann::json* out);

class FieldReader {
 public:
  // `object` must be a JSON object and outlive the reader. `prefix` names it in errors ("" for
  // the body, "messages[2]." for a message).
  FieldReader(const nlohmann::json& object, std::string prefix, std::optional<ApiError>* error)
      : object_(object), prefix_(std::move(prefix)), error_(*error) {}

  // The field, when present and not null (no type check).
  const nlohmann::json* Get(std::string_view name) const;
  std::optional<std::string> String(std::string_view name);
  std::optional<bool> Bool(std::string_view name);
  // A number in [min, max].
  std::optional<double> Number(std::string_view name, double min, double max);
  // An integer in [min, max] (a float with no fraction counts, as in JSON).
  std::optional<int64_t> Integer(std::string_view name, int64_t min, int64_t max);
  // The field when it is an object / an array; nullptr when absent (or after a type error).
  const nlohmann::json* Object(std::string_view name);
  const nlohmann::json* Array(std::string_view name);
  // Array, required and not empty: absent is "is required", [] is "must not be empty".
  const nlohmann::json* NonEmptyArray(std::string_view name);

  // Records a 400 about `name` (first error wins), or any error.
  void Fail(std::string_view name, const std::string& message);
  void Fail(ApiError error) {
    if (!error_) error_ = std::move(error);
  }
  // A reader of a nested object, sharing this reader's error.
  FieldReader Nested(const nlohmann::json& object, std::string prefix) const {
    return FieldReader(object, std::move(prefix), &error_);
  }
  bool failed() const { return error_.has_value(); }
  std::string Name(std::string_view name) const { return prefix_ + std::string(name); }

 private:
  const nlohmann::json& object_;
  const std::string prefix_;
  std::optional<ApiError>& error_;
};

// A JSON type's name for error messages ("a string", "an array", ...).
const char* JsonTypeName(const nlohmann::json& value);

}  // namespace niels::daemon::http
