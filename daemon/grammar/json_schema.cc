#include "daemon/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "daemon/grammar/json_grammar.h"
#include "daemon/grammar/schema_integer.h"
#include "daemon/grammar/schema_regex.h"
#include "daemon/grammar/utf8.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace niels::daemon::grammar {
namespace {

using common::Status;
using Json = nlohmann::ordered_json;

constexpr size_t kMaxSchemaBytes = size_t{1} << 20;
constexpr int kMaxJsonNesting = 64;

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$anchor",
    "deprecated", "readOnly", "writeOnly", "contentEncoding", "contentMediaType", "$defs",
    "definitions", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary"};
const std::set<std::string, std::less<>> kRefused = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
    "patternProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
    "additionalItems", "contains", "minContains", "maxContains", "minProperties", "maxProperties",
    "multipleOf", "$dynamicRef", "$recursiveRef"};
const std::set<std::string, std::less<>> kReserved = {
    "root", "space", "char", "string", "integral-part", "decimal-part", "number", "integer",
    "boolean", "null", "value", "object", "array", "date", "time", "date-time", "uuid"};

// Text (GBNF) of the format rules; each is the string contents, quotes excluded.
const std::map<std::string, std::string, std::less<>> kFormats = {
    {"date", R"([0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02" "-" ("0" [1-9] | "1" [0-9] | "2" [0-8])))"},
    {"time", R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ([zZ] | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
    {"date-time", R"(date [tT] time)"},
    {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
};

// A GBNF string literal whose content is `bytes` (UTF-8) verbatim.
std::string GbnfLiteral(std::string_view bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: out.push_back(c);
    }
  }
  return out + "\"";
}

std::string PointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Deepest nesting of [ and { in JSON text (strings skipped); scanned before parsing so that a deep
// document never reaches nlohmann's recursive code.
int JsonNesting(std::string_view text) {
  int depth = 0, max = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max = std::max(max, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const GrammarLimits& limits) : limits_(limits) {}

  common::StatusOr<std::string> Compile(std::string_view text) {
    if (text.size() > kMaxSchemaBytes) {
      return Status::InvalidArgument(fmt::format("json schema too large: {} bytes (the limit is {})",
                                                 text.size(), kMaxSchemaBytes));
    }
    if (JsonNesting(text) > kMaxJsonNesting) {
      return Status::InvalidArgument(fmt::format("json schema nested deeper than {} levels", kMaxJsonNesting));
    }
    root_ = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (root_.is_discarded()) return Status::InvalidArgument("json schema is not valid JSON");
    const std::string expr = Visit(root_, "", "root");
    if (!status_.ok()) return status_;
    std::string out = "root ::= " + expr + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    out += JsonPrimitiveRules();
    return out;
  }

 private:
  std::string Fail(const std::string& pointer, const std::string& why) {
    if (status_.ok()) {
      status_ = Status::InvalidArgument(
          fmt::format("json schema at {}: {}", pointer.empty() ? "/ (the root)" : pointer, why));
    }
    return "";
  }

  std::string NewRule(const std::string& hint, const std::string& body) {
    const std::string name = NewName(hint);
    rules_.emplace_back(name, body);
    return name;
  }

  std::string NewName(const std::string& hint) {
    std::string base;
    for (char c : hint) base.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
    if (base.empty() || base.size() > 40) base = base.empty() ? "r" : base.substr(0, 40);
    std::string name = base;
    for (int i = 1; kReserved.count(name) != 0 || !names_.insert(name).second; ++i) {
      name = fmt::format("{}-{}", base, i);
    }
    return name;
  }

  void UseFormat(const std::string& format) {
    if (!formats_used_.insert(format).second) return;
    if (format == "date-time") {
      UseFormat("date");
      UseFormat("time");
    }
    rules_.emplace_back(format, kFormats.at(format));
  }

  uint32_t Count(const Json& v, const std::string& pointer) {
    if (!v.is_number_integer() && !(v.is_number_float() && v.get<double>() == std::floor(v.get<double>()))) {
      Fail(pointer, "must be a non-negative integer");
      return 0;
    }
    const double d = v.get<double>();
    if (d < 0) {
      Fail(pointer, "must be a non-negative integer");
      return 0;
    }
    if (d > limits_.max_repetition) {
      Fail(pointer, fmt::format("{} is above the supported limit {}", d, limits_.max_repetition));
      return 0;
    }
    return static_cast<uint32_t>(d);
  }

  std::string Visit(const Json& s, const std::string& ptr, const std::string& hint) {
    if (!status_.ok()) return "";
    if (++depth_ > kMaxJsonNesting * 4) return Fail(ptr, "schema nested too deeply");
    std::string out = VisitInner(s, ptr, hint);
    --depth_;
    return out;
  }

  std::string VisitInner(const Json& s, const std::string& ptr, const std::string& hint) {
    if (s.is_boolean()) return s.get<bool>() ? "value" : Fail(ptr, "the schema false matches nothing");
    if (!s.is_object()) return Fail(ptr, "a schema must be an object or a boolean");
    bool has_validation = false;
    for (const auto& [key, value] : s.items()) {
      if (kRefused.count(key) != 0) return Fail(ptr + "/" + PointerToken(key), fmt::format("unsupported keyword '{}'", key));
      if (key == "uniqueItems" && value == true) return Fail(ptr + "/uniqueItems", "unsupported keyword 'uniqueItems' (true)");
      if (kAnnotations.count(key) == 0 && key != "$ref" && key != "anyOf" && key != "oneOf") has_validation = true;
    }
    if (s.contains("$ref")) {
      if (has_validation || s.contains("anyOf") || s.contains("oneOf")) {
        return Fail(ptr, "$ref together with other validating keywords is not supported");
      }
      return Ref(s["$ref"], ptr + "/$ref");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (has_validation || (s.contains("anyOf") && s.contains("oneOf"))) {
        return Fail(ptr, fmt::format("{} together with other validating keywords is not supported", key));
      }
      return Union(s[key], ptr + "/" + key, hint);
    }
    if (s.contains("allOf")) return AllOf(s, ptr, hint);
    if (s.contains("const") || s.contains("enum")) return Enum(s, ptr);
    std::vector<std::string> types;
    if (!Types(s, ptr, &types)) return "";
    if (types.empty()) return "value";
    std::vector<std::string> alternatives;
    for (const std::string& t : types) {
      alternatives.push_back(Typed(s, t, ptr, hint));
      if (!status_.ok()) return "";
    }
    return alternatives.size() == 1 ? alternatives[0] : Join(alternatives);
  }

  static std::string Join(const std::vector<std::string>& alternatives) {
    std::string out = "(";
    for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
    return out + ")";
  }

  // The schema's types: "type" (string or list), else inferred from the keywords present.
  bool Types(const Json& s, const std::string& ptr, std::vector<std::string>* out) {
    static const std::set<std::string, std::less<>> kTypes = {"object", "array",   "string", "number",
                                                              "integer", "boolean", "null"};
    if (s.contains("type")) {
      const Json& t = s["type"];
      std::vector<Json> list = t.is_array() ? std::vector<Json>(t.begin(), t.end()) : std::vector<Json>{t};
      if (list.empty()) return Fail(ptr + "/type", "empty type list"), false;
      for (const Json& one : list) {
        if (!one.is_string() || kTypes.count(one.get<std::string>()) == 0) {
          return Fail(ptr + "/type", fmt::format("unknown type {}", one.dump())), false;
        }
        out->push_back(one.get<std::string>());
      }
      return true;
    }
    auto any = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys) {
        if (s.contains(k)) return true;
      }
      return false;
    };
    if (any({"properties", "required", "additionalProperties"})) out->push_back("object");
    if (any({"items", "prefixItems", "minItems", "maxItems"})) out->push_back("array");
    if (any({"minLength", "maxLength", "pattern", "format"})) out->push_back("string");
    if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) out->push_back("integer");
    return true;
  }

  std::string Typed(const Json& s, const std::string& type, const std::string& ptr, const std::string& hint) {
    if (type == "string") return String(s, ptr, hint);
    if (type == "object") return Object(s, ptr, hint);
    if (type == "array") return Array(s, ptr, hint);
    const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                         s.contains("exclusiveMaximum");
    if (type == "integer") return bounded ? IntegerRange(s, ptr, hint) : "integer";
    if (type == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (s.contains(k)) return Fail(ptr + "/" + k, fmt::format("unsupported keyword '{}' for type number", k));
      }
      return "number";
    }
    return type;  // boolean, null
  }

  std::string IntegerRange(const Json& s, const std::string& ptr, const std::string& hint) {
    IntegerBounds b;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (!s.contains(k)) continue;
      if (!s[k].is_number()) return Fail(ptr + "/" + k, "must be a number");
      const double v = s[k].get<double>();
      const std::string key = k;
      if (key == "minimum") b.min = std::max(b.min, std::ceil(v));
      if (key == "exclusiveMinimum") b.min = std::max(b.min, std::floor(v) + 1);
      if (key == "maximum") b.max = std::min(b.max, std::floor(v));
      if (key == "exclusiveMaximum") b.max = std::min(b.max, std::ceil(v) - 1);
    }
    auto body = IntegerRangeGbnf(b);
    if (!body.ok()) return Fail(ptr, body.status().message());
    return NewRule(hint, "(" + *body + ") space");
  }

  std::string String(const Json& s, const std::string& ptr, const std::string& hint) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (!s["format"].is_string() || kFormats.count(s["format"].get<std::string>()) == 0) {
        return Fail(ptr + "/format", fmt::format("unsupported format {} (supported: date, time, date-time, uuid)",
                                                 s["format"].dump()));
      }
      if (lengths || s.contains("pattern")) return Fail(ptr, "format together with pattern or lengths is not supported");
      const std::string f = s["format"].get<std::string>();
      UseFormat(f);
      return "\"\\\"\" " + f + " \"\\\"\" space";
    }
    if (s.contains("pattern")) {
      if (lengths) return Fail(ptr, "pattern together with minLength/maxLength is not supported");
      if (!s["pattern"].is_string()) return Fail(ptr + "/pattern", "must be a string");
      auto g = PatternToGbnf(s["pattern"].get<std::string>(), limits_.max_repetition);
      if (!g.ok()) return Fail(ptr + "/pattern", g.status().message());
      return NewRule(hint, "\"\\\"\" " + *g + " \"\\\"\" space");
    }
    if (!lengths) return "string";
    const uint32_t min = s.contains("minLength") ? Count(s["minLength"], ptr + "/minLength") : 0;
    const bool has_max = s.contains("maxLength");
    const uint32_t max = has_max ? Count(s["maxLength"], ptr + "/maxLength") : 0;
    if (!status_.ok()) return "";
    if (has_max && max < min) return Fail(ptr, "maxLength is below minLength");
    const std::string rep = has_max ? fmt::format("{{{},{}}}", min, max) : fmt::format("{{{},}}", min);
    return NewRule(hint, "\"\\\"\" char" + rep + " \"\\\"\" space");
  }

  std::string Enum(const Json& s, const std::string& ptr) {
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) return Fail(ptr + "/enum", "must be an array");
      if (s.contains("const")) return Fail(ptr, "const together with enum is not supported");
      values.assign(s["enum"].begin(), s["enum"].end());
    }
    std::vector<std::string> types;
    if (s.contains("type") && !Types(s, ptr, &types)) return "";
    std::vector<std::string> alternatives;
    for (const Json& v : values) {
      if (!types.empty() && !HasType(v, types)) continue;
      alternatives.push_back(GbnfLiteral(v.dump(-1, ' ', false, Json::error_handler_t::strict)) + " space");
    }
    if (alternatives.empty()) return Fail(ptr, "enum/const leaves no value (of the given type)");
    return Join(alternatives);
  }

  static bool HasType(const Json& v, const std::vector<std::string>& types) {
    for (const std::string& t : types) {
      if ((t == "string" && v.is_string()) || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
          (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) || (t == "number" && v.is_number()) ||
          (t == "integer" && (v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()))))) {
        return true;
      }
    }
    return false;
  }

  std::string Union(const Json& list, const std::string& ptr, const std::string& hint) {
    if (!list.is_array() || list.empty()) return Fail(ptr, "must be a non-empty array of schemas");
    std::vector<std::string> alternatives;
    for (size_t i = 0; i < list.size(); ++i) {
      alternatives.push_back(Visit(list[i], fmt::format("{}/{}", ptr, i), fmt::format("{}-{}", hint, i)));
      if (!status_.ok()) return "";
    }
    return Join(alternatives);
  }

  const Json* Resolve(const std::string& ref, const std::string& ptr) {
    if (ref.empty() || ref[0] != '#') return Fail(ptr, fmt::format("unsupported $ref '{}' (only local references '#...')", ref)), nullptr;
    const Json* at = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') return Fail(ptr, fmt::format("unsupported $ref '{}' (anchors are not supported)", ref)), nullptr;
    while (i < ref.size()) {
      const size_t next = ref.find('/', i + 1);
      std::string token = ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
      std::string key;
      for (size_t k = 0; k < token.size(); ++k) {
        if (token[k] == '~' && k + 1 < token.size() && (token[k + 1] == '0' || token[k + 1] == '1')) {
          key.push_back(token[k + 1] == '0' ? '~' : '/');
          ++k;
        } else {
          key.push_back(token[k]);
        }
      }
      if (at->is_object() && at->contains(key)) {
        at = &(*at)[key];
      } else if (at->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 key.size() < 9 && std::stoul(key) < at->size()) {
        at = &(*at)[std::stoul(key)];
      } else {
        return Fail(ptr, fmt::format("$ref '{}' points to nothing", ref)), nullptr;
      }
      i = next == std::string::npos ? ref.size() : next;
    }
    return at;
  }

  std::string Ref(const Json& ref, const std::string& ptr) {
    if (!ref.is_string()) return Fail(ptr, "must be a string");
    const std::string target = ref.get<std::string>();
    auto it = ref_rules_.find(target);
    if (it != ref_rules_.end()) return it->second;
    const Json* schema = Resolve(target, ptr);
    if (schema == nullptr) return "";
    const size_t slash = target.rfind('/');
    const std::string name = NewName(slash == std::string::npos || slash + 1 >= target.size() ? "ref" : target.substr(slash + 1));
    ref_rules_.emplace(target, name);  // before visiting: recursion refers to the name
    const size_t index = rules_.size();
    rules_.emplace_back(name, "");
    const std::string body = Visit(*schema, target.substr(1), name);
    rules_[index].second = body;
    return name;
  }

  std::string AllOf(const Json& s, const std::string& ptr, const std::string& hint) {
    const Json& parts = s["allOf"];
    if (!parts.is_array() || parts.empty()) return Fail(ptr + "/allOf", "must be a non-empty array of schemas");
    Json merged = Json::object();
    for (const auto& [key, value] : s.items()) {
      if (key != "allOf") merged[key] = value;
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string part_ptr = fmt::format("{}/allOf/{}", ptr, i);
      const Json* part = &parts[i];
      for (int hops = 0; part->is_object() && part->contains("$ref") && hops < 32; ++hops) {
        part = Resolve((*part)["$ref"].is_string() ? (*part)["$ref"].get<std::string>() : "", part_ptr);
        if (part == nullptr) return "";
      }
      if (!part->is_object()) return Fail(part_ptr, "allOf parts must be object schemas");
      for (const auto& [key, value] : part->items()) {
        if (kAnnotations.count(key) != 0) continue;
        if (key == "type" && value == "object") {
          merged["type"] = "object";
        } else if (key == "properties" && value.is_object()) {
          if (merged.contains("properties") && !merged["properties"].is_object()) {
            return Fail(ptr + "/properties", "must be an object");
          }
          for (const auto& [name, sub] : value.items()) {
            if (merged["properties"].contains(name) && merged["properties"][name] != sub) {
              return Fail(part_ptr + "/properties/" + PointerToken(name), "the property differs between allOf parts");
            }
            merged["properties"][name] = sub;
          }
        } else if (key == "required" && value.is_array()) {
          if (merged.contains("required") && !merged["required"].is_array()) {
            return Fail(ptr + "/required", "must be an array of strings");
          }
          for (const Json& r : value) merged["required"].push_back(r);
        } else {
          return Fail(part_ptr + "/" + PointerToken(key),
                      fmt::format("keyword '{}' in an allOf part is not supported (only object properties and required)", key));
        }
      }
    }
    return Visit(merged, ptr, hint);
  }

  std::string Object(const Json& s, const std::string& ptr, const std::string& hint);
  std::string NotNamesKey(const std::vector<std::string>& names, const std::string& hint);
  std::string Array(const Json& s, const std::string& ptr, const std::string& hint);

  GrammarLimits limits_;
  Json root_;
  Status status_;
  int depth_ = 0;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::set<std::string> formats_used_;
  std::map<std::string, std::string> ref_rules_;
};


// Members in the order of `properties`; required ones must appear, optional ones may, extra ones
// (additionalProperties) follow them. first_i: what may come from member i on when no member was
// written yet; after_i: the same once one was (each further member then starts with a comma).
std::string SchemaCompiler::Object(const Json& s, const std::string& ptr, const std::string& hint) {
  const Json empty = Json::object();
  const Json& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) return Fail(ptr + "/properties", "must be an object");
  std::vector<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return Fail(ptr + "/required", "must be an array of strings");
    for (const Json& r : s["required"]) {
      if (!r.is_string()) return Fail(ptr + "/required", "must be an array of strings");
      if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end()) {
        required.push_back(r.get<std::string>());
      }
    }
  }
  enum { kNoExtra, kAnyExtra, kSchemaExtra } extra = s.contains("properties") ? kNoExtra : kAnyExtra;
  std::string extra_value = "value";
  if (s.contains("additionalProperties")) {
    const Json& ap = s["additionalProperties"];
    if (ap.is_boolean()) {
      extra = ap.get<bool>() ? kAnyExtra : kNoExtra;
    } else {
      extra = kSchemaExtra;
      extra_value = Visit(ap, ptr + "/additionalProperties", hint + "-additional");
      if (!status_.ok()) return "";
    }
  }
  if (props.empty() && required.empty() && extra == kAnyExtra) return "object";

  struct Member {
    std::string kv;
    char kind;  // 'R' required, 'O' optional, 'S' any number (extra members)
  };
  std::vector<Member> members;
  std::vector<std::string> names;
  auto is_required = [&](const std::string& n) {
    return std::find(required.begin(), required.end(), n) != required.end();
  };
  for (const auto& [name, sub] : props.items()) {
    const std::string value = Visit(sub, ptr + "/properties/" + PointerToken(name), hint + "-" + name);
    if (!status_.ok()) return "";
    const std::string key = GbnfLiteral(Json(name).dump(-1, ' ', false, Json::error_handler_t::replace));
    members.push_back({NewRule(hint + "-" + name + "-kv", key + " space \":\" space " + value),
                       is_required(name) ? 'R' : 'O'});
    names.push_back(name);
  }
  for (const std::string& name : required) {
    if (props.contains(name)) continue;
    if (extra == kNoExtra) {
      return Fail(ptr + "/required", fmt::format("required property '{}' is neither in properties nor allowed by "
                                                 "additionalProperties", name));
    }
    const std::string key = GbnfLiteral(Json(name).dump(-1, ' ', false, Json::error_handler_t::replace));
    members.push_back({NewRule(hint + "-" + name + "-kv", key + " space \":\" space " + extra_value), 'R'});
    names.push_back(name);
  }
  if (extra != kNoExtra) {
    const std::string key = NotNamesKey(names, hint + "-extra");
    members.push_back({NewRule(hint + "-extra-kv", key + " \":\" space " + extra_value), 'S'});
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
    after = NewRule(fmt::format("{}-after{}", hint, i), new_after);
    first = NewRule(fmt::format("{}-from{}", hint, i), new_first);
  }
  return NewRule(hint, "\"{\" space " + first + " \"}\" space");
}

// A JSON string (with its space) that is none of `names`: raw characters only (no escapes), so
// that no spelling of a name slips through. One rule per node of the names' trie.
std::string SchemaCompiler::NotNamesKey(const std::vector<std::string>& names, const std::string& hint) {
  const CodePointSet plain = CodePointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}}).Complement();
  const std::string plain_rule = NewRule(hint + "-char", plain.ToGbnfClass());
  struct Node {
    std::map<uint32_t, size_t> children;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& name : names) {
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
    rule[i] = NewRule(fmt::format("{}{}", hint, i), body);
  }
  return "\"\\\"\" " + rule[0] + " \"\\\"\" space";
}

std::string SchemaCompiler::Array(const Json& s, const std::string& ptr, const std::string& hint) {
  std::vector<std::string> prefix;
  if (s.contains("prefixItems")) {
    const Json& p = s["prefixItems"];
    if (!p.is_array()) return Fail(ptr + "/prefixItems", "must be an array of schemas");
    for (size_t i = 0; i < p.size(); ++i) {
      prefix.push_back(Visit(p[i], fmt::format("{}/prefixItems/{}", ptr, i), fmt::format("{}-{}", hint, i)));
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
      item = Visit(it, ptr + "/items", hint + "-item");
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

}  // namespace

common::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json, const GrammarLimits& limits) {
  try {
    return SchemaCompiler(limits).Compile(schema_json);
  } catch (const nlohmann::json::exception& e) {  // a shape the checks above missed: still an error value
    return Status::InvalidArgument(std::string("json schema: ") + e.what());
  }
}

common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchema(std::string_view schema_json,
                                                                           const GrammarLimits& limits) {
  auto gbnf = JsonSchemaToGbnf(schema_json, limits);
  if (!gbnf.ok()) return gbnf.status();
  auto g = CompiledGrammar::FromGbnf(*gbnf, limits);
  if (!g.ok()) {
    return Status::InvalidArgument("json schema cannot be satisfied or is too large: " + g.status().message());
  }
  return g;
}

}  // namespace niels::daemon::grammar
