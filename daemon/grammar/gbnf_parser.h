#pragma once
// ParseGbnf: llama.cpp's GBNF grammar text -> RuleSet (rule_set.h). The syntax
// (llama.cpp grammars/README.md, and its parser's behaviour where the README is silent):
//
//   name ::= alternatives            a rule; names are [a-zA-Z0-9-]+; `root` is the start rule
//   a b c                            a sequence; `a | b` alternatives (lowest precedence)
//   ( ... )                          a group; inside parentheses newlines are whitespace
//   x* x+ x? x{m} x{m,} x{m,n}       repetition of the item before (a whole string literal is one
//                                    item); operators may follow each other: "a"+? = ("a"+)?
//   "text"                           a literal; escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH
//                                    \UHHHHHHHH (code points, never raw bytes)
//   [a-z0-9_] [^"\\]                 a character class with ranges; `^` first negates it; `-`
//                                    first, last or escaped is itself
//   .                                any character (any Unicode scalar value, newline included)
//   # comment                        to the end of the line
//
// A rule ends at a newline outside parentheses, except that a newline right after `|` continues
// it. Grammar text must be UTF-8; everything matches Unicode scalar values (never surrogates).
// Not supported: llama.cpp's token references `<[id]>`, `<token>` and `!<...>` (refused).
// Stricter than llama.cpp: a rule defined twice, a range whose end precedes its start and a class
// that matches nothing are errors (llama.cpp silently keeps the last definition / an empty set).
//
// Errors (INVALID_ARGUMENT, "grammar line L, column C: reason"): syntax, unknown escapes, invalid
// UTF-8, an unknown rule (at its first use), a missing root, sizes beyond GrammarLimits. The
// semantic checks (left recursion, rules that match nothing) are CompiledGrammar's.
// Cost: one pass over the text, charged to the grammar compile work budget (rule_set.h): a unit per
// byte, per symbol and rule made and per range of each class; past the budget, RESOURCE_EXHAUSTED
// naming it. Thread-safe (no shared state).

#include <string_view>

#include "common/status.h"
#include "daemon/grammar/rule_set.h"

namespace niels::daemon::grammar {

// The first form charges a meter of its own (GrammarCompileMeter(limits, text.size())); the second
// charges `meter`, which the caller then passes on to CompiledGrammar::FromRuleSet.
common::StatusOr<RuleSet> ParseGbnf(std::string_view text, const GrammarLimits& limits = {});
common::StatusOr<RuleSet> ParseGbnf(std::string_view text, const GrammarLimits& limits, WorkMeter* meter);

}  // namespace niels::daemon::grammar
