#pragma once
// Values as text, the way the Python that runs Jinja2 writes them: str() (what `{{ x }}` and `~`
// print), repr() (list and dict elements), json.dumps() as transformers' `tojson` filter calls it
// (ensure_ascii=False, keys in insertion order, optional indent), and conversion from and to
// nlohmann::json for the render context.
//
// Every writer stops with a kLimit JinjaError once its output would pass `max_bytes` (a list
// repeated a million times must not become a gigabyte string). Errors are JinjaError (errors.h).

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "daemon/text/jinja/value.h"

namespace niels::daemon::text::jinja {

// str(value). Undefined prints as "".
std::string PyStr(const Value& value, size_t max_bytes);
// repr(value).
std::string PyRepr(const Value& value, size_t max_bytes);

// json.dumps's options, as transformers' tojson filter passes them (its defaults here).
struct JsonOptions {
  bool ensure_ascii = false;          // escape non-ASCII as \uXXXX
  std::optional<std::string> indent;  // none: one line; else put before each nesting level
                                      // (Python's int indent n is n spaces)
  std::string item_separator = ", ";  // Python's default: ", " without indent, "," with
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// json.dumps(value, ...). Errors as Python raises them: Undefined, callables and objects are "not
// JSON serializable", dict keys must be str/int/float/bool/None (and of one kind to sort).
std::string ToJson(const Value& value, const JsonOptions& options, size_t max_bytes);

// A JSON document as a Value: objects become dicts (key order kept: hence ordered_json), arrays
// lists, integers int (out of int64 range: an error), other numbers float. A string that is not
// valid UTF-8 is an error. Nesting deeper than `max_depth` is an error (kLimit).
Value FromJson(const nlohmann::ordered_json& json, int max_depth);

}  // namespace niels::daemon::text::jinja
