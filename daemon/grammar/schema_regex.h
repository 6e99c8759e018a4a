#pragma once
// JSON Schema `pattern` -> GBNF, for a documented subset of regular expressions. Internal to the
// schema compiler (json_schema.h).
//
// Supported: literal characters; escapes \. \\ \/ \- \^ \$ ... (any punctuation), \n \r \t \f \v,
// \xHH, \uHHHH; classes [abc] [a-z] [^...]; `.` (any character but \n \r U+2028 U+2029, as in
// ECMA-262 and a subset of Python's); \d \w \s as [0-9] [A-Za-z0-9_] [ \t\n\r\f\v] and \D \W \S
// as printable ASCII outside those (the parts where ECMA-262 and Python's Unicode classes agree);
// quantifiers * + ? {m} {m,} {m,n} (a lazy `?` after one changes nothing here); groups ( ) and
// (?: ); alternation |; `^` as the pattern's first and `$` as its last character. A pattern is
// searched for, as JSON Schema says: without `^` anything may come before the match, without `$`
// anything after it.
// Refused with INVALID_ARGUMENT naming the offset: anchors elsewhere, backreferences, lookaround
// and other (?...) groups, \b \B \p{..} and other letter escapes, shorthand classes inside a
// negated class, a `{` that is not a quantifier, a quantifier after a quantifier (`a???`, `a+*`;
// a lazy `?` is not one), quantifiers above GrammarLimits::max_repetition.
//
// The result matches the JSON encoding (between the quotes) of the strings it describes: `"`, `\`
// and control characters appear escaped (\" \\ \n ... or \u00XX), every other character raw, one
// decoded character per matched character.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/grammar/code_point_set.h"

namespace niels::daemon::grammar {

// A GBNF expression (parenthesized) for the JSON string contents described by `pattern`; at most
// about `max_bytes` (INVALID_ARGUMENT "... the pattern's grammar passes N bytes" beyond). Linear in
// the pattern and its result, but for a copy of each group's text per enclosing group (at most
// 100 levels).
common::StatusOr<std::string> PatternToGbnf(std::string_view pattern, uint32_t max_repetition,
                                            size_t max_bytes = size_t{1} << 20);

// A GBNF expression matching the JSON encoding of exactly one character of `set` (see above).
// REQUIRES: !set.empty().
std::string JsonCharFragment(const CodePointSet& set);

}  // namespace niels::daemon::grammar
