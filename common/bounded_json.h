#pragma once
// JSON that nielsd reads from files it does not control (config.json, generation_config.json,
// tokenizer_config.json, tokenizer.json, a safetensors header, model.safetensors.index.json, the
// conversations stored in the session database), parsed with bounded nesting, and bounded
// excerpts of such values for error messages.
//
// nlohmann-json's parser and (since 3.10) its destructor are iterative, but dump(), comparisons and
// most code that walks a value recurse once per level: a value nested 200,000 levels deep
// overflows the stack. ParseJsonBounded refuses nesting past kMaxJsonNesting while it parses, at
// the first bracket past the limit, so nothing deeper is ever built and every value it returns may
// be walked recursively. JsonExcerpt prints any value without recursing and in bounded work.

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace niels::common {

// The deepest nesting of arrays and objects (the outermost counts as level 1) a JSON file nielsd
// reads may have. The files of real models nest at most 6 levels (tokenizer.json's normalizer
// sequences); 128 leaves room for any of them and bounds every recursion over a parsed value.
inline constexpr int kMaxJsonNesting = 128;

// How many bytes of a value an error message quotes (JsonExcerpt's default).
inline constexpr size_t kJsonExcerptBytes = 80;

// Why ParseJsonBounded failed.
enum class JsonParseFailure { kNone, kSyntax, kTooDeep };

// Parses `text` as one JSON value. INVALID_ARGUMENT, naming `source`:
//   "<source>: nested deeper than 128 levels" when arrays and objects nest past kMaxJsonNesting;
//   "<source>: invalid JSON: <nlohmann-json's message>" for a syntax error or a number that does
//   not fit a double.
// `failure`, when not null, is set to which (kNone on success), for readers that word a syntax
// error their own way. Work and memory are linear in text.size(). As nlohmann-json's lexer does,
// a NUL byte outside a string ends the text: what follows it is neither parsed nor built.
StatusOr<nlohmann::json> ParseJsonBounded(std::string_view text, std::string_view source,
                                          JsonParseFailure* failure = nullptr);

// The error ParseJsonBounded returns for nesting past kMaxJsonNesting, for readers that parse with
// another library and its own depth limit (simdjson's, set to kMaxJsonNesting).
Status JsonNestingError(std::string_view source);

// `value` as compact JSON for an error message, at most `max_bytes` bytes (cut text ends in
// "..."), invalid UTF-8 replaced by U+FFFD. Iterative, and the work is bounded by max_bytes
// whatever the value's size or depth.
std::string JsonExcerpt(const nlohmann::json& value, size_t max_bytes = kJsonExcerptBytes);

}  // namespace niels::common
