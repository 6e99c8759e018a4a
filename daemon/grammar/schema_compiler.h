#pragma once
// SchemaCompiler: the JSON Schema -> GBNF translation behind json_schema.h (its header has the
// supported subset). Internal to the grammar room: schema_compiler.cc has the schema keywords,
// types, enums, unions and references; schema_containers.cc objects and arrays.
// One compiler per schema; not thread-safe.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "daemon/grammar/rule_set.h"
#include "nlohmann/json.hpp"

namespace niels::daemon::grammar::internal {

using Json = nlohmann::ordered_json;

// A GBNF string literal whose content is `bytes` (UTF-8) verbatim.
std::string GbnfLiteral(std::string_view bytes);
// `key` as one JSON pointer token (~ and / escaped).
std::string PointerToken(std::string_view key);

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const GrammarLimits& limits) : limits_(limits) {}

  // The whole grammar (root ::= ..., the generated rules, JsonPrimitiveRules()), or the first error.
  common::StatusOr<std::string> Compile(std::string_view text);

 private:
  // Records the first error ("json schema at <pointer>: <why>") and returns "".
  std::string Fail(const std::string& pointer, const std::string& why);
  // Adds `name ::= body` under a fresh name made from `hint`; returns the name.
  std::string NewRule(const std::string& hint, const std::string& body);
  std::string NewName(const std::string& hint);
  void UseFormat(const std::string& format);
  // A non-negative integer keyword (minItems, maxLength, ...) within GrammarLimits::max_repetition.
  uint32_t Count(const Json& v, const std::string& pointer);
  // A GBNF expression for the values `s` allows (trailing `space` included); "" after Fail. `ptr`
  // is the schema's JSON pointer, `hint` names the rules made for it.
  std::string Visit(const Json& s, const std::string& ptr, const std::string& hint);
  std::string VisitInner(const Json& s, const std::string& ptr, const std::string& hint);
  static std::string Join(const std::vector<std::string>& alternatives);
  // The schema's types: "type" (string or list), else inferred from the keywords present.
  bool Types(const Json& s, const std::string& ptr, std::vector<std::string>* out);
  std::string Typed(const Json& s, const std::string& type, const std::string& ptr, const std::string& hint);
  std::string IntegerRange(const Json& s, const std::string& ptr, const std::string& hint);
  std::string String(const Json& s, const std::string& ptr, const std::string& hint);
  std::string Enum(const Json& s, const std::string& ptr);
  static bool HasType(const Json& v, const std::vector<std::string>& types);
  std::string Union(const Json& list, const std::string& ptr, const std::string& hint);
  const Json* Resolve(const std::string& ref, const std::string& ptr);
  std::string Ref(const Json& ref, const std::string& ptr);
  std::string AllOf(const Json& s, const std::string& ptr, const std::string& hint);
  std::string Object(const Json& s, const std::string& ptr, const std::string& hint);
  std::string NotNamesKey(const std::vector<std::string>& names, const std::string& hint);
  std::string Array(const Json& s, const std::string& ptr, const std::string& hint);

  GrammarLimits limits_;
  Json root_;
  common::Status status_;
  int depth_ = 0;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::set<std::string> formats_used_;
  std::map<std::string, std::string> ref_rules_;
};

}  // namespace niels::daemon::grammar::internal
