#pragma once
// RuleSet: a grammar as rules of alternatives of symbols, the form between the GBNF parser
// (gbnf_parser.h) and CompiledGrammar (compiled_grammar.h). Groups and repetitions are already
// rewritten into generated rules; string literals are sequences of one-character classes.
//
// GrammarLimits bounds everything an untrusted grammar controls; both the parser and the compiler
// enforce it (INVALID_ARGUMENT "... too large ..."). It also holds the two compile work budgets
// (WorkMeter below): RESOURCE_EXHAUSTED "... work budget exhausted ...".

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/budgets.h"
#include "common/status.h"
#include "daemon/grammar/code_point_set.h"
#include "fmt/format.h"

namespace niels::daemon::grammar {

struct GrammarLimits {
  // Largest grammar text accepted (bytes). Default 1 MiB.
  size_t max_text_bytes = common::kSchemaGrammarBytesLimit;
  // Most rules after rewriting groups and repetitions. Default 100,000.
  size_t max_rules = common::kGrammarRulesLimit;
  // Most symbols in all alternatives together after rewriting (a string literal counts one per
  // character, `x{m,n}` copies x n times). Default 1,000,000.
  size_t max_symbols = common::kGrammarSymbolsLimit;
  // Largest m or n of a repetition `{m,n}`. Default 10,000.
  uint32_t max_repetition = 10'000;
  // Deepest nesting of parentheses. Default 200.
  int max_group_depth = 200;

  // Work budgets, in work units (what one unit is: WorkMeter below), each of the form
  // a x input bytes + b. Every step of both compilers is linear in its input and its output, so a
  // realistic grammar or schema stays far below them (compile_work_test: llama.cpp's reference
  // grammars and realistic schemas use under 1/20 of theirs); what passes them is an input whose
  // output is much larger than itself (e.g. `x{10000}` many times, or one big $defs entry merged
  // into many allOf), refused before its work is done.
  //
  // "grammar compile work budget": GBNF text -> CompiledGrammar (ParseGbnf + FromRuleSet), at most
  // grammar_work_per_byte x grammar text bytes + grammar_work_base units.
  uint64_t grammar_work_per_byte = common::kGrammarCompileStepsPerByte;
  uint64_t grammar_work_base = common::kGrammarCompileStepsFixed;
  // "json schema compile work budget": JSON Schema text -> GBNF text (json_schema.h), at most
  // schema_work_per_byte x schema bytes + schema_work_base units. The GBNF it produces is then
  // compiled under the grammar compile work budget of its own size.
  uint64_t schema_work_per_byte = common::kSchemaCompileStepsPerByte;
  uint64_t schema_work_base = common::kSchemaCompileStepsFixed;

  // Stops a compile that has started: polled by both stages' WorkMeter each time the work done
  // crosses a multiple of kCancelPollUnits; once it returns true the compile ends with CANCELLED
  // ("the request was cancelled") at its next check, having done at most about kCancelPollUnits
  // more units. Empty: never stopped. (The daemon sets it to the request's cancel flag.)
  std::function<bool()> cancelled;
};

// Work units between two polls of GrammarLimits::cancelled (a few milliseconds of compiling).
inline constexpr uint64_t kCancelPollUnits = uint64_t{1} << 16;

// The work one compilation did, in work units, for tests and statistics. A field stays 0 when
// that stage did not run.
struct CompileWork {
  uint64_t schema_units = 0;   // JSON Schema -> GBNF
  uint64_t schema_budget = 0;  // its budget for this input
  uint64_t grammar_units = 0;  // GBNF -> CompiledGrammar
  uint64_t grammar_budget = 0;
};

// Counts the work units of one compilation stage against its budget. A unit is one elementary
// step of the compilers: a byte of input scanned or of output written, a symbol, alternative or
// rule created or visited by a pass, a hash lookup or probe, a JSON value copied or compared, a
// priority-queue operation. Charge() returns false once the total passes the budget; from then on
// status() is RESOURCE_EXHAUSTED naming the budget, e.g. "grammar compile work budget exhausted:
// more than 4065536 work units (64 x 1024 input bytes + 4000000)". With a `cancelled` predicate
// (GrammarLimits::cancelled) it is polled whenever the total crosses a multiple of
// kCancelPollUnits; once true, Charge() returns false and status() is CANCELLED (not counted as a
// refusal).
class WorkMeter {
 public:
  WorkMeter(common::BudgetId budget, std::string budget_name, uint64_t per_byte, uint64_t base, size_t input_bytes,
            std::function<bool()> cancelled = {})
      : budget_id_(budget),
        name_(std::move(budget_name)),
        per_byte_(per_byte),
        base_(base),
        input_bytes_(input_bytes),
        budget_(SaturatingBudget(per_byte, base, input_bytes)),
        cancelled_(std::move(cancelled)) {}

  bool Charge(uint64_t units) {
    const uint64_t before = used_;
    used_ = units > UINT64_MAX - used_ ? UINT64_MAX : used_ + units;
    if (cancelled_ && !stopped_ && before / kCancelPollUnits != used_ / kCancelPollUnits) stopped_ = cancelled_();
    return !exhausted();
  }
  bool exhausted() const { return stopped_ || used_ > budget_; }
  bool stopped() const { return stopped_; }
  uint64_t used() const { return used_; }
  uint64_t budget() const { return budget_; }
  // CANCELLED once stopped; otherwise the first call after exhaustion counts the refusal
  // (common::Refuse), later calls repeat it.
  common::Status status() const {
    if (stopped_) return common::Status::Cancelled("the request was cancelled");
    if (!exhausted()) return common::Status::Ok();
    if (!refusal_) {
      refusal_ = common::Refuse(budget_id_, fmt::format("{} exhausted: more than {} work units ({} x {} input bytes + {})",
                                                        name_, budget_, per_byte_, input_bytes_, base_));
    }
    return *refusal_;
  }

 private:
  static uint64_t SaturatingBudget(uint64_t per_byte, uint64_t base, uint64_t bytes) {
    if (bytes != 0 && per_byte > (UINT64_MAX - base) / bytes) return UINT64_MAX;
    return per_byte * bytes + base;
  }

  common::BudgetId budget_id_;
  std::string name_;
  uint64_t per_byte_, base_, input_bytes_, budget_;
  uint64_t used_ = 0;
  std::function<bool()> cancelled_;
  bool stopped_ = false;
  mutable std::optional<common::Status> refusal_;
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

// The meters of the two budgets of `limits` for an input of `input_bytes`.
inline WorkMeter GrammarCompileMeter(const GrammarLimits& limits, size_t input_bytes) {
  return WorkMeter(common::BudgetId::kGrammarCompileSteps, "grammar compile work budget", limits.grammar_work_per_byte, limits.grammar_work_base,
                   input_bytes, limits.cancelled);
}
inline WorkMeter SchemaCompileMeter(const GrammarLimits& limits, size_t input_bytes) {
  return WorkMeter(common::BudgetId::kSchemaCompileSteps, "json schema compile work budget", limits.schema_work_per_byte, limits.schema_work_base,
                   input_bytes, limits.cancelled);
}

// "line 3, column 7" of a byte offset of `text` (columns count characters, both are 1-based).
std::string LineColumn(std::string_view text, size_t offset);

// How messages name a rule: "rule 'value' (line 2, column 1)", "the group at line 3, column 9",
// "the repetition '*' at line 3, column 14".
std::string DescribeRule(const RuleSet& rules, uint32_t id, std::string_view text);

}  // namespace niels::daemon::grammar
