#include "daemon/tool_calls/call_shapes.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "daemon/tool_calls/json_text.h"

namespace niels::daemon::tool_calls {
namespace {

using Json = nlohmann::json;

// The object's keys are written without escapes and none repeats (nlohmann keeps one value per
// key, so a repeated key shows as fewer parsed keys than written ones).
bool KeysPlainAndDistinct(const std::vector<JsonMember>& members, const Json& object) {
  if (members.size() != object.size()) return false;
  for (const JsonMember& member : members) {
    if (member.raw_key.find('\\') != std::string_view::npos) return false;
  }
  return true;
}

const JsonMember* FindMember(const std::vector<JsonMember>& members, std::string_view key) {
  for (const JsonMember& member : members) {
    if (member.raw_key == key) return &member;
  }
  return nullptr;
}

// One call object: "name" and the arguments under `arguments_keys` (exactly one of them present),
// plus "type": "function" when `type_allowed`; no other key.
std::optional<ToolCall> CallOf(std::string_view text, const std::vector<JsonMember>& members, const Json& object,
                               std::initializer_list<std::string_view> arguments_keys, bool type_allowed,
                               const std::vector<std::string>& tool_names) {
  if (!object.is_object() || !KeysPlainAndDistinct(members, object)) return std::nullopt;
  size_t known_keys = 0;
  const JsonMember* name = FindMember(members, "name");
  if (name == nullptr) return std::nullopt;
  ++known_keys;
  const JsonMember* arguments = nullptr;
  std::string arguments_key;
  for (std::string_view key : arguments_keys) {
    if (const JsonMember* found = FindMember(members, key)) {
      if (arguments != nullptr) return std::nullopt;  // both spellings
      arguments = found;
      arguments_key = key;
      ++known_keys;
    }
  }
  if (arguments == nullptr) return std::nullopt;
  if (type_allowed && FindMember(members, "type") != nullptr) {
    const Json& type = object["type"];
    if (!type.is_string() || type.get_ref<const std::string&>() != "function") return std::nullopt;
    ++known_keys;
  }
  if (known_keys != members.size()) return std::nullopt;
  const Json& name_value = object["name"];
  if (!name_value.is_string() || !std::binary_search(tool_names.begin(), tool_names.end(), name_value.get_ref<const std::string&>())) return std::nullopt;
  if (!object[arguments_key].is_object()) return std::nullopt;
  return ToolCall{name_value.get<std::string>(), std::string(arguments->value.Of(text))};
}

// The keys as written could be the family's (the exact rules are CallOf's, on the parsed value).
bool RawKeysFit(ToolCallFamily family, const std::vector<JsonMember>& members) {
  if (family == ToolCallFamily::kGenericJson) return members.size() == 1 && members[0].raw_key == "tool_calls";
  const size_t most = family == ToolCallFamily::kLlama3Json ? 3 : 2;
  return members.size() >= 2 && members.size() <= most && FindMember(members, "name") != nullptr;
}

}  // namespace

std::optional<std::vector<ToolCall>> CallsOfObject(ToolCallFamily family, std::string_view object,
                                                   const std::vector<std::string>& tool_names, uint64_t* work) {
  // The raw keys first (the walk stays inside the text whatever it holds): an object without the
  // family's keys is refused before the JSON parser runs.
  const std::vector<JsonMember> members = ObjectMembers(object, {0, object.size()}, work);
  if (!RawKeysFit(family, members)) return std::nullopt;
  *work += object.size();
  common::StatusOr<Json> parsed = common::ParseJsonBounded(object, "tool call");
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  const Json& value = *parsed;
  std::vector<ToolCall> calls;
  switch (family) {
    case ToolCallFamily::kHermes:
    case ToolCallFamily::kLlama3Json: {
      const bool llama = family == ToolCallFamily::kLlama3Json;
      std::optional<ToolCall> call =
          llama ? CallOf(object, members, value, {"parameters", "arguments"}, /*type_allowed=*/true, tool_names)
                : CallOf(object, members, value, {"arguments"}, /*type_allowed=*/false, tool_names);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
      return calls;
    }
    case ToolCallFamily::kGenericJson: {
      if (!KeysPlainAndDistinct(members, value) || members.size() != 1 || members[0].raw_key != "tool_calls") {
        return std::nullopt;
      }
      const Json& list = value["tool_calls"];
      if (!list.is_array() || list.empty()) return std::nullopt;
      const std::vector<TextSpan> elements = ArrayElements(object, members[0].value, work);
      if (elements.size() != list.size()) return std::nullopt;
      for (size_t i = 0; i < elements.size(); ++i) {
        if (!list[i].is_object()) return std::nullopt;
        const std::vector<JsonMember> call_members = ObjectMembers(object, elements[i], work);
        std::optional<ToolCall> call =
            CallOf(object, call_members, list[i], {"arguments"}, /*type_allowed=*/false, tool_names);
        if (!call) return std::nullopt;
        calls.push_back(std::move(*call));
      }
      return calls;
    }
  }
  return std::nullopt;
}

}  // namespace niels::daemon::tool_calls
