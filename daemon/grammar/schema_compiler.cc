#include "daemon/grammar/schema_compiler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "daemon/grammar/json_grammar.h"
#include "daemon/grammar/schema_integer.h"
#include "daemon/grammar/schema_regex.h"
#include "fmt/format.h"

namespace niels::daemon::grammar::internal {

using common::Status;

namespace {

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

}  // namespace

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

namespace {

// Values in `v` (itself, its members and elements, recursively): the cost of copying or comparing
// it. Iterative (`v` may be nested as deep as the schema allows).
uint64_t JsonValueCount(const Json& v) {
  uint64_t n = 0;
  std::vector<const Json*> todo = {&v};
  while (!todo.empty()) {
    const Json* j = todo.back();
    todo.pop_back();
    ++n;
    if (j->is_structured()) {
      for (const Json& child : *j) todo.push_back(&child);
    }
  }
  return n;
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

}  // namespace

common::StatusOr<std::string> SchemaCompiler::Compile(std::string_view text) {
  if (text.size() > kMaxSchemaBytes) {
    return Status::InvalidArgument(fmt::format("json schema too large: {} bytes (the limit is {})",
                                               text.size(), kMaxSchemaBytes));
  }
  if (JsonNesting(text) > kMaxJsonNesting) {
    return Status::InvalidArgument(fmt::format("json schema nested deeper than {} levels", kMaxJsonNesting));
  }
  try {
    root_ = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.byte: 1-based, one past the last byte read.
    const size_t offset = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    return Status::InvalidArgument(fmt::format("json schema is not valid JSON: {}", LineColumn(text, offset)));
  }
  if (!Work(text.size()) || !Output(JsonPrimitiveRules().size())) return status_;
  const std::string expr = Visit(root_, "", "root");
  if (!status_.ok()) return status_;
  std::string out = "root ::= " + expr + "\n";
  if (!Output(out.size())) return status_;
  out.reserve(output_bytes_);
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  out += JsonPrimitiveRules();
  return out;
}

bool SchemaCompiler::Work(uint64_t units) {
  if (meter_->Charge(units)) return true;
  if (status_.ok()) status_ = meter_->status();
  return false;
}

bool SchemaCompiler::Output(size_t bytes) {
  output_bytes_ += bytes;
  if (!Work(bytes)) return false;
  if (output_bytes_ > limits_.max_text_bytes) {
    if (status_.ok()) {
      status_ = common::Refuse(common::BudgetId::kSchemaGrammarBytes,
                               fmt::format("json schema too large as a grammar: its GBNF would pass the limit of {} bytes",
                                           limits_.max_text_bytes));
    }
    return false;
  }
  return true;
}

void SchemaCompiler::AddRule(std::string name, std::string body) {
  if (!Output(name.size() + body.size() + 6)) return;  // "name ::= body\n"
  if (rules_.size() + 1 > limits_.max_rules) {
    if (status_.ok()) {
      status_ = common::Refuse(common::BudgetId::kGrammarRules,
                               fmt::format("json schema too large as a grammar: more than {} rules", limits_.max_rules));
    }
    return;
  }
  rules_.emplace_back(std::move(name), std::move(body));
}

std::string SchemaCompiler::Hint(std::string_view base, std::string_view a, std::string_view b, std::string_view c) {
  std::string out(base.substr(0, kNameBaseBytes));
  for (std::string_view part : {a, b, c}) {
    if (out.size() >= kNameBaseBytes) break;
    out.append(part.substr(0, kNameBaseBytes - out.size()));
  }
  return out;
}

const Json* SchemaCompiler::Member(const Json& object, const std::string& key) {
  constexpr size_t kScanned = 8;  // smaller objects are searched member by member
  if (!Work(1 + key.size())) return nullptr;
  if (object.size() <= kScanned) {
    Work(object.size());
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }
  auto [index, built] = member_index_.try_emplace(&object);
  if (built) {
    if (!Work(object.size())) return nullptr;
    for (auto it = object.begin(); it != object.end(); ++it) index->second.emplace(it.key(), &it.value());
  }
  const auto found = index->second.find(key);
  return found == index->second.end() ? nullptr : found->second;
}

std::string SchemaCompiler::Fail(const std::string& pointer, const std::string& why) {
  if (status_.ok()) {
    status_ = Status::InvalidArgument(
        fmt::format("json schema at {}: {}", pointer.empty() ? "/ (the root)" : pointer, why));
  }
  return "";
}

std::string SchemaCompiler::NewRule(const std::string& hint, const std::string& body) {
  std::string name = NewName(hint);
  AddRule(name, body);
  return name;
}

// The first free name of base, base-1, base-2, ...: the counter of the base remembers where the
// last one was found, so each probe that fails skips a name for good (O(1) amortized per rule).
std::string SchemaCompiler::NewName(const std::string& hint) {
  std::string base;
  for (size_t i = 0; i < hint.size() && i < kNameBaseBytes; ++i) {
    base.push_back(std::isalnum(static_cast<unsigned char>(hint[i])) ? hint[i] : '-');
  }
  if (base.empty()) base = "r";
  uint32_t& next = next_suffix_[base];
  std::string name = next == 0 ? base : fmt::format("{}-{}", base, next);
  Work(1 + base.size());
  while (kReserved.count(name) != 0 || !names_.insert(name).second) {
    name = fmt::format("{}-{}", base, ++next);
    Work(1 + name.size());
  }
  ++next;
  return name;
}

void SchemaCompiler::UseFormat(const std::string& format) {
  if (!formats_used_.insert(format).second) return;
  if (format == "date-time") {
    UseFormat("date");
    UseFormat("time");
  }
  AddRule(format, kFormats.at(format));
}

uint32_t SchemaCompiler::Count(const Json& v, const std::string& pointer) {
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

std::string SchemaCompiler::Visit(const Json& s, const std::string& ptr, const std::string& hint) {
  if (!status_.ok()) return "";
  if (!Work(1 + ptr.size() + kKeywordLookups * (s.is_object() ? s.size() : 0))) return "";
  if (++depth_ > kMaxJsonNesting * 4) return Fail(ptr, "schema nested too deeply");
  std::string out = VisitInner(s, ptr, hint);
  --depth_;
  return out;
}

std::string SchemaCompiler::VisitInner(const Json& s, const std::string& ptr, const std::string& hint) {
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

std::string SchemaCompiler::Join(const std::vector<std::string>& alternatives) {
  size_t bytes = 2;
  for (const std::string& a : alternatives) bytes += a.size() + 3;
  if (!Work(bytes)) return "";
  std::string out = "(";
  out.reserve(bytes);
  for (size_t i = 0; i < alternatives.size(); ++i) {
    if (i) out += " | ";
    out += alternatives[i];
  }
  return out + ")";
}

bool SchemaCompiler::Types(const Json& s, const std::string& ptr, std::vector<std::string>* out) {
  static const std::set<std::string, std::less<>> kTypes = {"object", "array",   "string", "number",
                                                            "integer", "boolean", "null"};
  if (s.contains("type")) {
    const Json& t = s["type"];
    std::vector<Json> list = t.is_array() ? std::vector<Json>(t.begin(), t.end()) : std::vector<Json>{t};
    if (!Work(list.size())) return false;
    if (list.empty()) return Fail(ptr + "/type", "empty type list"), false;
    for (const Json& one : list) {
      if (!one.is_string() || kTypes.count(one.get<std::string>()) == 0) {
        return Fail(ptr + "/type", fmt::format("unknown type {}", one.dump())), false;
      }
      // Each type once (at most seven): a repeated "object" would compile the properties again.
      if (std::find(out->begin(), out->end(), one.get<std::string>()) == out->end()) {
        out->push_back(one.get<std::string>());
      }
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

std::string SchemaCompiler::Typed(const Json& s, const std::string& type, const std::string& ptr, const std::string& hint) {
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

std::string SchemaCompiler::IntegerRange(const Json& s, const std::string& ptr, const std::string& hint) {
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

std::string SchemaCompiler::String(const Json& s, const std::string& ptr, const std::string& hint) {
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
    const std::string& pattern = s["pattern"].get_ref<const std::string&>();
    if (!Work(pattern.size())) return "";
    auto g = PatternToGbnf(pattern, limits_.max_repetition, limits_.max_text_bytes);
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

std::string SchemaCompiler::Enum(const Json& s, const std::string& ptr) {
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
    if (!Work(alternatives.back().size())) return "";
  }
  if (alternatives.empty()) return Fail(ptr, "enum/const leaves no value (of the given type)");
  return Join(alternatives);
}

bool SchemaCompiler::HasType(const Json& v, const std::vector<std::string>& types) {
  for (const std::string& t : types) {
    if ((t == "string" && v.is_string()) || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
        (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) || (t == "number" && v.is_number()) ||
        (t == "integer" && (v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()))))) {
      return true;
    }
  }
  return false;
}

std::string SchemaCompiler::Union(const Json& list, const std::string& ptr, const std::string& hint) {
  if (!list.is_array() || list.empty()) return Fail(ptr, "must be a non-empty array of schemas");
  std::vector<std::string> alternatives;
  for (size_t i = 0; i < list.size(); ++i) {
    alternatives.push_back(Visit(list[i], fmt::format("{}/{}", ptr, i), Hint(hint, "-", std::to_string(i))));
    if (!status_.ok()) return "";
  }
  return Join(alternatives);
}

const Json* SchemaCompiler::Resolve(const std::string& ref, const std::string& ptr) {
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
    const Json* member = at->is_object() ? Member(*at, key) : nullptr;
    if (!status_.ok()) return nullptr;
    if (member != nullptr) {
      at = member;
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

// One rule per target: every spelling of a pointer to the same value ("#/a/0", "#/a/00", ...)
// shares it.
std::string SchemaCompiler::Ref(const Json& ref, const std::string& ptr) {
  if (!ref.is_string()) return Fail(ptr, "must be a string");
  const std::string& target = ref.get_ref<const std::string&>();
  const Json* schema = Resolve(target, ptr);
  if (schema == nullptr) return "";
  auto it = ref_rules_.find(schema);
  if (it != ref_rules_.end()) return it->second;
  const size_t slash = target.rfind('/');
  const std::string name = NewName(slash == std::string::npos || slash + 1 >= target.size()
                                       ? std::string("ref")
                                       : target.substr(slash + 1, kNameBaseBytes));
  ref_rules_.emplace(schema, name);  // before visiting: recursion refers to the name
  const size_t index = rules_.size();
  AddRule(name, "");
  if (!status_.ok()) return "";
  const std::string body = Visit(*schema, target.substr(1), name);
  if (!status_.ok() || !Output(body.size())) return "";
  rules_[index].second = body;
  return name;
}

// The merged schema: the members of `s` but allOf (in their order), then type, properties and
// required as the parts extend them. Properties are found by name through a hash index while
// merging, and a part that resolves to a value already merged is skipped (merging it again changes
// nothing), so the merge is linear in the parts' sizes.
std::string SchemaCompiler::AllOf(const Json& s, const std::string& ptr, const std::string& hint) {
  const Json& parts = s["allOf"];
  if (!parts.is_array() || parts.empty()) return Fail(ptr + "/allOf", "must be a non-empty array of schemas");
  Json merged = Json::object();
  Json::object_t& members = merged.get_ref<Json::object_t&>();
  std::optional<Json> type, properties, required;
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (!Work(1 + JsonValueCount(it.value()))) return "";
    if (it.key() == "allOf") continue;
    if (it.key() == "type") {
      type = it.value();
    } else if (it.key() == "properties") {
      properties = it.value();
    } else if (it.key() == "required") {
      required = it.value();
    } else {
      members.emplace_back(it.key(), it.value());  // the keys of `s` are distinct already
    }
  }
  // properties' members by name (positions in its object), built when a part first adds one.
  std::unordered_map<std::string, size_t> property_index;
  bool indexed = false;
  std::unordered_set<const Json*> merged_parts;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string part_ptr = fmt::format("{}/allOf/{}", ptr, i);
    const Json* part = &parts[i];
    for (int hops = 0; part->is_object() && part->contains("$ref") && hops < 32; ++hops) {
      if (!Work(1 + part->size())) return "";
      part = Resolve((*part)["$ref"].is_string() ? (*part)["$ref"].get<std::string>() : "", part_ptr);
      if (part == nullptr) return "";
    }
    if (!part->is_object()) return Fail(part_ptr, "allOf parts must be object schemas");
    if (!merged_parts.insert(part).second) continue;
    for (auto member = part->begin(); member != part->end(); ++member) {
      const std::string& key = member.key();
      const Json& value = member.value();
      if (!Work(1)) return "";
      if (kAnnotations.count(key) != 0) continue;
      if (key == "type" && value == "object") {
        type = "object";
      } else if (key == "properties" && value.is_object()) {
        if (!properties) properties = Json::object();
        if (!properties->is_object()) return Fail(ptr + "/properties", "must be an object");
        // The object's members as the vector they are (positions, and appending without a search).
        Json::object_t::Container& merged_props = properties->get_ref<Json::object_t&>();
        if (!indexed) {
          if (!Work(merged_props.size())) return "";
          for (size_t k = 0; k < merged_props.size(); ++k) property_index.emplace(merged_props[k].first, k);
          indexed = true;
        }
        for (auto prop = value.begin(); prop != value.end(); ++prop) {
          const Json& sub = prop.value();
          if (!Work(1 + prop.key().size() + JsonValueCount(sub))) return "";
          const auto found = property_index.find(prop.key());
          if (found != property_index.end()) {
            if (merged_props[found->second].second != sub) {
              return Fail(part_ptr + "/properties/" + PointerToken(prop.key()), "the property differs between allOf parts");
            }
            continue;
          }
          // Appended to the underlying vector: the name is known to be new (the index keeps
          // positions, which stay valid as the vector grows).
          merged_props.emplace_back(prop.key(), sub);
          property_index.emplace(prop.key(), merged_props.size() - 1);
        }
      } else if (key == "required" && value.is_array()) {
        if (!required) required = Json::array();
        if (!required->is_array()) return Fail(ptr + "/required", "must be an array of strings");
        if (!Work(1 + value.size())) return "";
        for (const Json& r : value) required->push_back(r);
      } else {
        return Fail(part_ptr + "/" + PointerToken(key),
                    fmt::format("keyword '{}' in an allOf part is not supported (only object properties and required)", key));
      }
    }
  }
  if (type) members.emplace_back("type", std::move(*type));
  if (properties) members.emplace_back("properties", std::move(*properties));
  if (required) members.emplace_back("required", std::move(*required));
  return Visit(merged, ptr, hint);
}

}  // namespace niels::daemon::grammar::internal
