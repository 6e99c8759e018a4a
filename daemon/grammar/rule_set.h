#pragma once
// RuleSet: a grammar as rules of alternatives of symbols, the form between the GBNF parser
// (gbnf_parser.h) and CompiledGrammar (compiled_grammar.h). Groups and repetitions are already
// rewritten into generated rules; string literals are sequences of one-character classes.
//
// GrammarLimits bounds everything an untrusted grammar controls; both the parser and the compiler
// enforce it (INVALID_ARGUMENT "... too large ...").

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/grammar/code_point_set.h"

namespace niels::daemon::grammar {

struct GrammarLimits {
  // Largest grammar text accepted (bytes). Default 1 MiB.
  size_t max_text_bytes = size_t{1} << 20;
  // Most rules after rewriting groups and repetitions. Default 100,000.
  size_t max_rules = 100'000;
  // Most symbols in all alternatives together after rewriting (a string literal counts one per
  // character, `x{m,n}` copies x n times). Default 1,000,000.
  size_t max_symbols = 1'000'000;
  // Largest m or n of a repetition `{m,n}`. Default 10,000.
  uint32_t max_repetition = 10'000;
  // Deepest nesting of parentheses. Default 200.
  int max_group_depth = 200;
};

struct Symbol {
  enum Kind : uint8_t { kClass, kRule };
  Kind kind = kClass;
  uint32_t id = 0;  // index into RuleSet::classes or RuleSet::rules
  bool operator==(const Symbol&) const = default;
};

struct RuleDef {
  enum Origin : uint8_t { kNamed, kGroup, kRepetition };
  Origin origin = kNamed;
  std::string name;             // the GBNF name (kNamed); empty for generated rules
  size_t offset = 0;            // byte offset of the definition, the group's '(' or the operator
  size_t first_use_offset = 0;  // first reference (for "unknown rule" errors)
  bool defined = false;
  std::vector<std::vector<Symbol>> alternatives;
};

struct RuleSet {
  std::vector<RuleDef> rules;
  std::vector<CodePointSet> classes;
  uint32_t root = 0;
};

// "line 3, column 7" of a byte offset of `text` (columns count characters, both are 1-based).
std::string LineColumn(std::string_view text, size_t offset);

// How messages name a rule: "rule 'value' (line 2, column 1)", "the group at line 3, column 9",
// "the repetition '*' at line 3, column 14".
std::string DescribeRule(const RuleSet& rules, uint32_t id, std::string_view text);

}  // namespace niels::daemon::grammar
