#include "daemon/tool_calls/json_text.h"

namespace niels::daemon::tool_calls {
namespace {

// Reads the JSON text of `json` from `pos` on within [.., limit); returns the position after
// whitespace. Counts each byte read.
size_t SkipSpace(std::string_view json, size_t pos, size_t limit, uint64_t* work) {
  while (pos < limit && IsJsonSpace(json[pos])) {
    ++pos;
    ++*work;
  }
  return pos;
}

// The end (one past) of the JSON value starting at `pos` (not whitespace), at most `limit`.
size_t ValueEnd(std::string_view json, size_t pos, size_t limit, uint64_t* work) {
  if (pos >= limit) return limit;
  const char first = json[pos];
  if (first == '"') {
    bool escaped = false;
    for (size_t i = pos + 1; i < limit; ++i) {
      ++*work;
      const char c = json[i];
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        return i + 1;
      }
    }
    return limit;
  }
  if (first == '{' || first == '[') {
    uint64_t depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = pos; i < limit; ++i) {
      ++*work;
      const char c = json[i];
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
    }
    return limit;
  }
  // A number, true, false or null: up to the next delimiter.
  size_t i = pos;
  while (i < limit && !IsJsonSpace(json[i]) && json[i] != ',' && json[i] != '}' && json[i] != ']') {
    ++i;
    ++*work;
  }
  return i;
}

}  // namespace

bool JsonObjectEnd::Add(char c) {
  if (in_string_) {
    if (escaped_) {
      escaped_ = false;
    } else if (c == '\\') {
      escaped_ = true;
    } else if (c == '"') {
      in_string_ = false;
    }
    return false;
  }
  if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if ((c == '}' || c == ']') && depth_ > 0) {
    return --depth_ == 0;
  }
  return false;
}

std::vector<JsonMember> ObjectMembers(std::string_view json, TextSpan object, uint64_t* work) {
  std::vector<JsonMember> members;
  // Inside the braces.
  const size_t limit = object.end > object.begin ? object.end - 1 : object.begin;
  size_t pos = object.begin + 1;
  for (;;) {
    pos = SkipSpace(json, pos, limit, work);
    if (pos >= limit || json[pos] != '"') return members;
    const size_t key_end = ValueEnd(json, pos, limit, work);
    if (key_end < pos + 2) return members;
    JsonMember member;
    member.raw_key = json.substr(pos + 1, key_end - pos - 2);
    pos = SkipSpace(json, key_end, limit, work);
    if (pos >= limit || json[pos] != ':') return members;
    pos = SkipSpace(json, pos + 1, limit, work);
    member.value = {pos, ValueEnd(json, pos, limit, work)};
    members.push_back(member);
    pos = SkipSpace(json, member.value.end, limit, work);
    if (pos >= limit || json[pos] != ',') return members;
    ++pos;
  }
}

std::vector<TextSpan> ArrayElements(std::string_view json, TextSpan array, uint64_t* work) {
  std::vector<TextSpan> elements;
  const size_t limit = array.end > array.begin ? array.end - 1 : array.begin;
  size_t pos = array.begin + 1;
  for (;;) {
    pos = SkipSpace(json, pos, limit, work);
    if (pos >= limit) return elements;
    const TextSpan element{pos, ValueEnd(json, pos, limit, work)};
    if (element.end == element.begin) return elements;
    elements.push_back(element);
    pos = SkipSpace(json, element.end, limit, work);
    if (pos >= limit || json[pos] != ',') return elements;
    ++pos;
  }
}

}  // namespace niels::daemon::tool_calls
