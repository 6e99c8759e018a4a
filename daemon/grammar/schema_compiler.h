#pragma once
// SchemaCompiler: the JSON Schema -> GBNF translation behind json_schema.h (its header has the
// supported subset). Internal to the grammar room: schema_compiler.cc has the schema keywords,
// types, enums, unions and references; schema_containers.cc objects and arrays.
// One compiler per schema; not thread-safe.
//
// Cost: linear in the schema and the grammar it writes. Object members and $ref targets are found
// through hash indexes, rule names are made unique with a counter per name base, a $ref target
// (the JSON value it resolves to, whatever the spelling) becomes one rule, and the grammar's size
// (GrammarLimits::max_text_bytes, max_rules) is checked as each rule is added. All of it is charged
// to a WorkMeter (the json schema compile work budget, rule_set.h): per schema value visited
// 1 + its pointer's bytes + kKeywordLookups x its member count (the keyword lookups scan the
// object), a unit per byte of grammar written, per name probe, per hash lookup (plus the key's
// bytes), per JSON value an allOf merge copies or compares, per byte of a pattern.

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
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
  // Upper bound of the member lookups one schema object gets while it is compiled.
  static constexpr uint64_t kKeywordLookups = 40;
  // Rule names are made from the first kNameBaseBytes bytes of their hint.
  static constexpr size_t kNameBaseBytes = 40;

  // Charges `meter` (REQUIRES: it outlives the compiler).
  SchemaCompiler(const GrammarLimits& limits, WorkMeter* meter) : limits_(limits), meter_(meter) {}

  // The whole grammar (root ::= ..., the generated rules, JsonPrimitiveRules()), or the first error.
  common::StatusOr<std::string> Compile(std::string_view text);

 private:
  // Records the first error ("json schema at <pointer>: <why>") and returns "".
  std::string Fail(const std::string& pointer, const std::string& why);
  // Charges `units`; false (and the budget's error recorded) once the budget is exhausted.
  bool Work(uint64_t units);
  // Counts `bytes` of grammar written: work, and INVALID_ARGUMENT once the grammar passes
  // GrammarLimits::max_text_bytes.
  bool Output(size_t bytes);
  // Appends `name ::= body` to the grammar (counted; max_rules checked).
  void AddRule(std::string name, std::string body);
  // Adds `name ::= body` under a fresh name made from `hint`; returns the name.
  std::string NewRule(const std::string& hint, const std::string& body);
  std::string NewName(const std::string& hint);
  // The hint (rule name base) `base` + a + b + c, cut to kNameBaseBytes (all NewName reads).
  static std::string Hint(std::string_view base, std::string_view a, std::string_view b = {},
                          std::string_view c = {});
  // The member `key` of the object `object` (nullptr if none), through a hash index built the first
  // time a large object is searched. REQUIRES: `object` is part of root_.
  const Json* Member(const Json& object, const std::string& key);
  void UseFormat(const std::string& format);
  // A non-negative integer keyword (minItems, maxLength, ...) within GrammarLimits::max_repetition.
  uint32_t Count(const Json& v, const std::string& pointer);
  // A GBNF expression for the values `s` allows (trailing `space` included); "" after Fail. `ptr`
  // is the schema's JSON pointer, `hint` names the rules made for it.
  std::string Visit(const Json& s, const std::string& ptr, const std::string& hint);
  std::string VisitInner(const Json& s, const std::string& ptr, const std::string& hint);
  std::string Join(const std::vector<std::string>& alternatives);
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
  WorkMeter* meter_;
  Json root_;
  common::Status status_;
  int depth_ = 0;
  size_t output_bytes_ = 0;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::unordered_set<std::string> names_;
  // Per name base, the suffix its next rule name tries first (every lower one is taken).
  std::unordered_map<std::string, uint32_t> next_suffix_;
  std::set<std::string> formats_used_;
  // The rule of each $ref target, keyed by the resolved JSON value in root_.
  std::unordered_map<const Json*, std::string> ref_rules_;
  std::unordered_map<const Json*, std::unordered_map<std::string_view, const Json*>> member_index_;
};

}  // namespace niels::daemon::grammar::internal
