#include <algorithm>
#include <map>
#include <unordered_set>

#include "daemon/grammar/code_point_set.h"
#include "daemon/grammar/schema_compiler.h"
#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::grammar::internal {

// Members in the order of `properties`; required ones must appear, optional ones may, extra ones
// (additionalProperties) follow them. first_i: what may come from member i on when no member was
// written yet; after_i: the same once one was (each further member then starts with a comma).
std::string SchemaCompiler::Object(const Json& s, const std::string& ptr, const std::string& hint) {
  const Json empty = Json::object();
  const Json& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) return Fail(ptr + "/properties", "must be an object");
  // Names are looked up in hash sets: required ones (deduplicated, in their order) and properties.
  std::vector<std::string> required;
  std::unordered_set<std::string_view> required_set;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return Fail(ptr + "/required", "must be an array of strings");
    for (const Json& r : s["required"]) {
      if (!r.is_string()) return Fail(ptr + "/required", "must be an array of strings");
      const std::string& name = r.get_ref<const std::string&>();
      if (!Work(1 + name.size())) return "";
      if (required_set.insert(name).second) required.push_back(name);
    }
  }
  std::unordered_set<std::string_view> property_names;
  for (auto it = props.begin(); it != props.end(); ++it) {
    if (!Work(1 + it.key().size())) return "";
    property_names.insert(it.key());
  }
  enum { kNoExtra, kAnyExtra, kSchemaExtra } extra = s.contains("properties") ? kNoExtra : kAnyExtra;
  std::string extra_value = "value";
  if (s.contains("additionalProperties")) {
    const Json& ap = s["additionalProperties"];
    if (ap.is_boolean()) {
      extra = ap.get<bool>() ? kAnyExtra : kNoExtra;
    } else {
      extra = kSchemaExtra;
      extra_value = Visit(ap, ptr + "/additionalProperties", Hint(hint, "-additional"));
      if (!status_.ok()) return "";
      // Written once per required name outside properties and for the extra members: a rule of its
      // own unless it is one name already.
      if (extra_value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
          std::string::npos) {
        extra_value = NewRule(Hint(hint, "-additional"), extra_value);
        if (!status_.ok()) return "";
      }
    }
  }
  if (props.empty() && required.empty() && extra == kAnyExtra) return "object";

  struct Member {
    std::string kv;
    char kind;  // 'R' required, 'O' optional, 'S' any number (extra members)
  };
  std::vector<Member> members;
  std::vector<std::string> names;
  for (const auto& [name, sub] : props.items()) {
    const std::string value = Visit(sub, ptr + "/properties/" + PointerToken(name), Hint(hint, "-", name));
    if (!status_.ok()) return "";
    const std::string key = GbnfLiteral(Json(name).dump(-1, ' ', false, Json::error_handler_t::replace));
    members.push_back({NewRule(Hint(hint, "-", name, "-kv"), key + " space \":\" space " + value),
                       required_set.count(name) != 0 ? 'R' : 'O'});
    if (!status_.ok()) return "";
    names.push_back(name);
  }
  for (const std::string& name : required) {
    if (property_names.count(name) != 0) continue;
    if (extra == kNoExtra) {
      return Fail(ptr + "/required", fmt::format("required property '{}' is neither in properties nor allowed by "
                                                 "additionalProperties", name));
    }
    const std::string key = GbnfLiteral(Json(name).dump(-1, ' ', false, Json::error_handler_t::replace));
    members.push_back({NewRule(Hint(hint, "-", name, "-kv"), key + " space \":\" space " + extra_value), 'R'});
    if (!status_.ok()) return "";
    names.push_back(name);
  }
  if (extra != kNoExtra) {
    const std::string key = NotNamesKey(names, Hint(hint, "-extra"));
    if (!status_.ok()) return "";
    members.push_back({NewRule(Hint(hint, "-extra-kv"), key + " \":\" space " + extra_value), 'S'});
  }
  std::string after = "\"\"", first = "\"\"";
  for (size_t i = members.size(); i-- > 0;) {
    const Member& m = members[i];
    std::string new_after, new_first;
    if (m.kind == 'R') {
      new_after = "\",\" space " + m.kv + " " + after;
      new_first = m.kv + " " + after;
    } else if (m.kind == 'O') {
      new_after = "(\",\" space " + m.kv + ")? " + after;
      new_first = m.kv + " " + after + " | " + first;
    } else {
      new_after = "(\",\" space " + m.kv + ")* " + after;
      new_first = m.kv + " " + "(\",\" space " + m.kv + ")* " + after + " | " + first;
    }
    after = NewRule(Hint(hint, "-after", std::to_string(i)), new_after);
    first = NewRule(Hint(hint, "-from", std::to_string(i)), new_first);
    if (!status_.ok()) return "";
  }
  return NewRule(hint, "\"{\" space " + first + " \"}\" space");
}

// A JSON string (with its space) that is none of `names`: raw characters only (no escapes), so
// that no spelling of a name slips through. One rule per node of the names' trie.
std::string SchemaCompiler::NotNamesKey(const std::vector<std::string>& names, const std::string& hint) {
  const CodePointSet plain = CodePointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}}).Complement();
  const std::string plain_rule = NewRule(Hint(hint, "-char"), plain.ToGbnfClass());
  struct Node {
    std::map<uint32_t, size_t> children;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& name : names) {
    if (!Work(1 + name.size())) return "";
    std::vector<uint32_t> cps;
    size_t pos = 0;
    uint32_t cp = 0;
    bool representable = true;
    while (pos < name.size()) {
      if (!DecodeUtf8(name, &pos, &cp) || !plain.Contains(cp)) {
        representable = false;  // needs an escape: a raw-only key can never equal it
        break;
      }
      cps.push_back(cp);
    }
    if (!representable) continue;
    size_t at = 0;
    for (uint32_t c : cps) {
      auto it = trie[at].children.find(c);
      if (it == trie[at].children.end()) {
        trie.push_back(Node());
        it = trie[at].children.emplace(c, trie.size() - 1).first;
      }
      at = it->second;
    }
    trie[at].terminal = true;
  }
  // Rules bottom-up: children have larger indices than their parents.
  std::vector<std::string> rule(trie.size());
  for (size_t i = trie.size(); i-- > 0;) {
    std::vector<std::string> alternatives;
    if (!trie[i].terminal) alternatives.push_back("\"\"");
    std::vector<CodePointRange> taken;
    for (const auto& [c, child] : trie[i].children) {
      alternatives.push_back(CodePointSet::Single(c).ToGbnfClass() + " " + rule[child]);
      taken.push_back({c, c});
    }
    const CodePointSet rest = plain.Minus(CodePointSet(std::move(taken)));
    if (!rest.empty()) alternatives.push_back(rest.ToGbnfClass() + " " + plain_rule + "*");
    std::string body;
    for (size_t k = 0; k < alternatives.size(); ++k) body += (k ? " | " : "") + alternatives[k];
    rule[i] = NewRule(Hint(hint, std::to_string(i)), body);
    if (!status_.ok()) return "";
  }
  return "\"\\\"\" " + rule[0] + " \"\\\"\" space";
}

std::string SchemaCompiler::Array(const Json& s, const std::string& ptr, const std::string& hint) {
  std::vector<std::string> prefix;
  if (s.contains("prefixItems")) {
    const Json& p = s["prefixItems"];
    if (!p.is_array()) return Fail(ptr + "/prefixItems", "must be an array of schemas");
    for (size_t i = 0; i < p.size(); ++i) {
      prefix.push_back(Visit(p[i], fmt::format("{}/prefixItems/{}", ptr, i), Hint(hint, "-", std::to_string(i))));
      if (!status_.ok()) return "";
    }
  }
  bool extra_allowed = true;
  std::string item = "value";
  if (s.contains("items")) {
    const Json& it = s["items"];
    if (it.is_array()) return Fail(ptr + "/items", "items as an array (draft-07 tuples) is not supported; use prefixItems");
    if (it.is_boolean()) {
      extra_allowed = it.get<bool>();
    } else {
      item = Visit(it, ptr + "/items", Hint(hint, "-item"));
      if (!status_.ok()) return "";
    }
  }
  const uint32_t min = s.contains("minItems") ? Count(s["minItems"], ptr + "/minItems") : 0;
  const bool has_max = s.contains("maxItems");
  const uint32_t max = has_max ? Count(s["maxItems"], ptr + "/maxItems") : 0;
  if (!status_.ok()) return "";
  if (has_max && max < min) return Fail(ptr, "maxItems is below minItems");
  const size_t k = has_max ? std::min<size_t>(prefix.size(), max) : prefix.size();
  uint32_t lo = 0, hi = 0;
  bool unbounded = false;
  if (extra_allowed) {
    lo = min > k ? static_cast<uint32_t>(min - k) : 0;
    if (has_max) {
      hi = static_cast<uint32_t>(max - k);
    } else if (prefix.empty() || s.contains("items")) {
      unbounded = true;
    } else {
      hi = lo;  // prefixItems without items: exactly the prefix (and what minItems demands)
    }
  } else if (min > k) {
    return Fail(ptr, "minItems asks for more items than prefixItems and items: false allow");
  }
  std::string body;
  for (size_t i = 0; i < k; ++i) body += (i ? "\",\" space " : "") + prefix[i] + " ";
  const std::string rep = unbounded ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, hi);
  if (unbounded || hi > 0) {
    if (k > 0) {
      body += "(\",\" space " + item + ")" + rep;
    } else {
      const uint32_t lo1 = lo > 0 ? lo - 1 : 0;
      const std::string rest = unbounded ? fmt::format("{{{},}}", lo1) : fmt::format("{{{},{}}}", lo1, hi - 1);
      body += "(" + item + " (\",\" space " + item + ")" + rest + ")" + (lo == 0 ? "?" : "");
    }
  }
  if (body.empty()) body = "\"\"";
  return NewRule(hint, "\"[\" space " + body + " \"]\" space");
}

}  // namespace niels::daemon::grammar::internal
