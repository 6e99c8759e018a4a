#pragma once
// CompiledGrammar: an immutable, checked grammar in the flat form the Matcher (matcher.h) runs.
// Built once per request from GBNF text (FromGbnf), a JSON Schema (json_schema.h) or the built-in
// "any JSON value" grammar (AnyJson), and shared read-only by any number of matchers and threads.
//
// Checks beyond the parser's (all INVALID_ARGUMENT, "grammar line L, column C: ..."):
//   - left recursion, direct (a ::= a "x") or indirect (a ::= b ..., b ::= a ...), also through
//     nullable prefixes (a ::= "x"? a); a repetition of something that can match the empty string
//     with no upper bound (("a"?)*) is reported as such;
//   - a rule reachable from root that can never match anything (every way through it recurses
//     without end), root included (an empty language).
// Together these make the matcher exact: every prefix it accepts can be completed.
// Cost: every step is linear in the grammar's symbols, alternatives and rules (the rule minima
// near-linear: a priority queue), charged to the "grammar compile work budget" of GrammarLimits
// (rule_set.h); past it, RESOURCE_EXHAUSTED naming that budget.
//
// Form: every rule is a list of alternatives; an alternative is a run of elements in `elements()`
// ending with a kEnd element. A kClass element matches one character of `char_class(arg)`; a kRule
// element expands rule `arg`.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/grammar/code_point_set.h"
#include "daemon/grammar/rule_set.h"

namespace niels::daemon::grammar {

class CompiledGrammar {
 public:
  struct Element {
    enum Kind : uint8_t { kEnd, kClass, kRule };
    Kind kind = kEnd;
    uint32_t arg = 0;  // class id (kClass) or rule id (kRule)
  };
  static constexpr uint32_t kInfinite = UINT32_MAX;

  // Parses and compiles GBNF text (gbnf_parser.h has the syntax) under the grammar compile work
  // budget of `limits` for text.size() bytes. `work`, when given, receives the units used and the
  // budget (also when it fails).
  static common::StatusOr<std::shared_ptr<const CompiledGrammar>> FromGbnf(
      std::string_view text, const GrammarLimits& limits = {}, CompileWork* work = nullptr);
  // Compiles a parsed rule set; `text` is the grammar it came from (for error positions). The
  // first form has the default budget for text.size() bytes; the second charges `meter`.
  static common::StatusOr<std::shared_ptr<const CompiledGrammar>> FromRuleSet(RuleSet rules,
                                                                              std::string_view text);
  static common::StatusOr<std::shared_ptr<const CompiledGrammar>> FromRuleSet(RuleSet rules, std::string_view text,
                                                                              WorkMeter* meter);
  // Any single JSON value, with llama.cpp's JSON whitespace convention (json_schema.h).
  static std::shared_ptr<const CompiledGrammar> AnyJson();
  // A grammar written around another: `outer` is GBNF text in which the rule named `slot` stands
  // for `inner` (its own definition there is a placeholder, e.g. `slot ::= "x"`, and is replaced
  // by a single alternative: inner's root). The result's rules are outer's followed by inner's, its
  // root outer's; inner is used as compiled (its rules need not be written as text again, so no
  // name of outer can clash with one of inner). Errors: outer's, as FromGbnf reports them, and
  // INVALID_ARGUMENT when outer defines no rule `slot`. Cost: outer parsed and the whole compiled
  // under the grammar compile work budget of `limits` for outer's bytes plus inner's source bytes
  // (linear in both). source() is outer's text followed by a comment line and inner's source: for
  // reading only (it is not one GBNF grammar).
  static common::StatusOr<std::shared_ptr<const CompiledGrammar>> Around(std::string_view outer,
                                                                       std::string_view slot,
                                                                       const CompiledGrammar& inner,
                                                                       const GrammarLimits& limits = {});

  uint32_t root() const { return root_; }
  size_t rule_count() const { return alt_begin_.size() - 1; }
  const std::vector<Element>& elements() const { return elements_; }
  // Start positions (indices into elements()) of a rule's alternatives.
  std::span<const uint32_t> alternatives(uint32_t rule) const {
    return {alt_starts_.data() + alt_begin_[rule], alt_starts_.data() + alt_begin_[rule + 1]};
  }
  const CodePointSet& char_class(uint32_t id) const { return classes_[id]; }
  size_t class_count() const { return classes_.size(); }
  // Fewest bytes that complete the alternative from element `pos` to its end (kInfinite if none;
  // never for rules reachable from root). Saturates below kInfinite.
  uint32_t suffix_min_bytes(uint32_t pos) const { return suffix_min_[pos]; }
  uint32_t rule_min_bytes(uint32_t rule) const { return rule_min_[rule]; }
  // The grammar's own text (GBNF; for a schema the generated grammar).
  const std::string& source() const { return source_; }
  // The heap bytes this grammar holds (its tables, classes and source), for memory accounting.
  size_t memory_bytes() const;

 private:
  CompiledGrammar() = default;

  uint32_t root_ = 0;
  std::vector<Element> elements_;
  std::vector<uint32_t> alt_starts_;
  std::vector<uint32_t> alt_begin_;  // rule r's alternatives: alt_starts_[alt_begin_[r] .. alt_begin_[r+1])
  std::vector<CodePointSet> classes_;
  std::vector<uint32_t> suffix_min_;
  std::vector<uint32_t> rule_min_;
  std::string source_;
};

}  // namespace niels::daemon::grammar
