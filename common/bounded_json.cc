#include "common/bounded_json.h"

#include <vector>

#include <fmt/format.h>

namespace niels::common {
namespace {

using Json = nlohmann::json;

// Thrown by the parser callback at the first array or object past the limit; it unwinds the
// parser before anything deeper is built.
struct NestedTooDeep {};

// A string (a value or a key) as JSON text, from at most its first max_bytes + 1 bytes (enough to
// show that an excerpt was cut).
std::string QuotedPrefix(const std::string& text, size_t max_bytes) {
  const Json prefix = text.size() > max_bytes + 1 ? Json(text.substr(0, max_bytes + 1)) : Json(text);
  return prefix.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Drops the end of `text` to fit max_bytes with "..." after it, without splitting a UTF-8 sequence.
void CutWithEllipsis(std::string& text, size_t max_bytes) {
  size_t keep = max_bytes >= 3 ? max_bytes - 3 : 0;
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  text.resize(keep);
  text += std::string_view("...").substr(0, max_bytes - keep);
}

}  // namespace

StatusOr<Json> ParseJsonBounded(std::string_view text, std::string_view source, JsonParseFailure* failure) {
  if (failure != nullptr) *failure = JsonParseFailure::kNone;
  // `depth` counts the arrays and objects already open around the event's value (0 at the root).
  const auto limit_nesting = [](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonNesting) {
      throw NestedTooDeep{};
    }
    return true;
  };
  try {
    return Json::parse(text, limit_nesting);
  } catch (const NestedTooDeep&) {
    if (failure != nullptr) *failure = JsonParseFailure::kTooDeep;
    return JsonNestingError(source);
  } catch (const Json::exception& e) {
    // parse_error, and out_of_range for a number too large for a double (1E86666).
    if (failure != nullptr) *failure = JsonParseFailure::kSyntax;
    return Status::InvalidArgument(fmt::format("{}: invalid JSON: {}", source, e.what()));
  }
}

Status JsonNestingError(std::string_view source) {
  return Status::InvalidArgument(fmt::format("{}: nested deeper than {} levels", source, kMaxJsonNesting));
}

std::string JsonExcerpt(const Json& value, size_t max_bytes) {
  // An explicit stack of the open arrays and objects. Every step appends at least one byte, and it
  // stops once the text is longer than max_bytes: at most max_bytes + 1 steps, whatever the value.
  struct Open {
    const Json* container;
    Json::const_iterator next;
    bool first;
  };
  std::vector<Open> open;
  std::string out;
  const auto append = [&](const Json& v) {
    if (v.is_structured()) {
      out += v.is_object() ? '{' : '[';
      open.push_back({&v, v.cbegin(), true});
    } else if (v.is_string()) {
      out += QuotedPrefix(v.get_ref<const std::string&>(), max_bytes);
    } else {
      out += v.dump();  // a number, true, false or null: a few bytes
    }
  };
  append(value);
  while (!open.empty() && out.size() <= max_bytes) {
    Open& top = open.back();
    if (top.next == top.container->cend()) {
      out += top.container->is_object() ? '}' : ']';
      open.pop_back();
      continue;
    }
    if (!top.first) out += ',';
    top.first = false;
    const Json& child = *top.next;
    if (top.container->is_object()) out += QuotedPrefix(top.next.key(), max_bytes) + ':';
    ++top.next;  // before append, which may grow `open` and move `top`
    append(child);
  }
  if (out.size() > max_bytes) CutWithEllipsis(out, max_bytes);
  return out;
}

}  // namespace niels::common
