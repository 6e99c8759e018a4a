#pragma once
// Byte-level helpers over JSON text for the tool-call parsers: finding where a JSON object that
// arrives byte by byte ends, and the members of an object or the elements of an array of text
// already validated as JSON, as spans of the text (so a call's arguments can be handed out exactly
// as the model wrote them). No allocation per byte; every function is linear in what it reads and
// adds what it reads to a work counter.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace niels::daemon::tool_calls {

// JSON's insignificant whitespace (RFC 8259): space, tab, line feed, carriage return.
inline bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Follows the brackets and strings of one JSON object fed byte by byte, starting with its `{`.
// Knows where the object ends, not whether it is valid: that is for the JSON parser once it ended.
class JsonObjectEnd {
 public:
  // Takes the next byte of the object. True when this byte was the brace that closes it (at depth
  // 0, outside strings). The first byte must be `{`. After true, Reset() before reuse.
  bool Add(char c);
  void Reset() { *this = JsonObjectEnd(); }

 private:
  uint64_t depth_ = 0;  // open brackets outside strings
  bool in_string_ = false;
  bool escaped_ = false;
};

// A span [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
  std::string_view Of(std::string_view text) const { return text.substr(begin, end - begin); }
};

// One member of a JSON object: the key's text between its quotes, as written (escapes not
// decoded), and the span of its value.
struct JsonMember {
  std::string_view raw_key;
  TextSpan value;
};

// The members of the object at `object` (the span of `{...}`) of `json`, which must be valid JSON
// (the result is unspecified otherwise, but reads stay inside the span). Adds the bytes read to
// `*work`.
std::vector<JsonMember> ObjectMembers(std::string_view json, TextSpan object, uint64_t* work);

// The elements of the array at `array` (the span of `[...]`), under the same terms.
std::vector<TextSpan> ArrayElements(std::string_view json, TextSpan array, uint64_t* work);

}  // namespace niels::daemon::tool_calls
