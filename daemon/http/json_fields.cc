#include "daemon/http/json_fields.h"

#include <cmath>

#include <fmt/format.h>

#include "common/bounded_json.h"

namespace niels::daemon::http {

std::optional<ApiError> ParseRequestBody(std::string_view body, nlohmann::json* out) {
  common::StatusOr<nlohmann::json> parsed = common::ParseJsonBounded(body, "the request body");
  if (!parsed.ok()) return MakeError(400, parsed.status().message());
  if (!parsed->is_object()) {
    return MakeError(400, fmt::format("the request body must be a JSON object, not {}", JsonTypeName(*parsed)));
  }
  *out = std::move(parsed).value();
  return std::nullopt;
}

const char* JsonTypeName(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::binary: return "binary";
    default: return "a number";
  }
}

const nlohmann::json* FieldReader::Get(std::string_view name) const {
  if (error_) return nullptr;
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::Fail(std::string_view name, const std::string& message) {
  if (error_) return;
  error_ = BadField(Name(name), Name(name) + ": " + message);
}

std::optional<std::string> FieldReader::String(std::string_view name) {
  const nlohmann::json* value = Get(name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) {
    Fail(name, fmt::format("must be a string, not {}", JsonTypeName(*value)));
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::optional<bool> FieldReader::Bool(std::string_view name) {
  const nlohmann::json* value = Get(name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) {
    Fail(name, fmt::format("must be a boolean, not {}", JsonTypeName(*value)));
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<double> FieldReader::Number(std::string_view name, double min, double max) {
  const nlohmann::json* value = Get(name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    Fail(name, fmt::format("must be a number, not {}", JsonTypeName(*value)));
    return std::nullopt;
  }
  const double number = value->get<double>();
  if (!(number >= min && number <= max)) {
    Fail(name, fmt::format("{} is out of range [{}, {}]", number, min, max));
    return std::nullopt;
  }
  return number;
}

std::optional<int64_t> FieldReader::Integer(std::string_view name, int64_t min, int64_t max) {
  const nlohmann::json* value = Get(name);
  if (value == nullptr) return std::nullopt;
  int64_t number = 0;
  if (value->is_number_integer()) {
    if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      Fail(name, fmt::format("{} is out of range [{}, {}]", value->get<uint64_t>(), min, max));
      return std::nullopt;
    }
    number = value->get<int64_t>();
  } else if (value->is_number_float() && std::isfinite(value->get<double>()) &&
             std::floor(value->get<double>()) == value->get<double>() && std::fabs(value->get<double>()) < 9e18) {
    number = static_cast<int64_t>(value->get<double>());
  } else {
    Fail(name, fmt::format("must be an integer, not {}", value->is_number() ? "a fraction" : JsonTypeName(*value)));
    return std::nullopt;
  }
  if (number < min || number > max) {
    Fail(name, fmt::format("{} is out of range [{}, {}]", number, min, max));
    return std::nullopt;
  }
  return number;
}

const nlohmann::json* FieldReader::Object(std::string_view name) {
  const nlohmann::json* value = Get(name);
  if (value == nullptr) return nullptr;
  if (!value->is_object()) {
    Fail(name, fmt::format("must be an object, not {}", JsonTypeName(*value)));
    return nullptr;
  }
  return value;
}

const nlohmann::json* FieldReader::Array(std::string_view name) {
  const nlohmann::json* value = Get(name);
  if (value == nullptr) return nullptr;
  if (!value->is_array()) {
    Fail(name, fmt::format("must be an array, not {}", JsonTypeName(*value)));
    return nullptr;
  }
  return value;
}

const nlohmann::json* FieldReader::NonEmptyArray(std::string_view name) {
  const nlohmann::json* value = Array(name);
  if (value == nullptr) {
    if (!failed()) Fail(name, "is required");
    return nullptr;
  }
  if (value->empty()) {
    Fail(name, "must not be empty");
    return nullptr;
  }
  return value;
}

}  // namespace niels::daemon::http
