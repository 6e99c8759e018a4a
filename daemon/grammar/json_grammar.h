#pragma once
// The JSON building blocks every JSON grammar of this room shares (the "any JSON value" grammar and
// the rules the schema compiler emits), as GBNF rule text.
//
// Whitespace is llama.cpp's json-schema-to-grammar convention: after every value and punctuation
// token an optional `space ::= | " " | "\n"{1,2} [ \t]{0,20}` (none before the first token; a
// complete output may end in it). Strings: any character but `"`, `\`, U+0000..U+001F and U+007F
// raw, or the escapes \" \\ \/ \b \f \n \r \t and \uXXXX of any non-surrogate code point (so every
// string is valid Unicode). Numbers: llama.cpp's (at most 16 integer, fraction and exponent digits).

#include <string>
#include <string_view>

namespace niels::daemon::grammar {

// Rule text for space, char, string, number, integer, boolean, null, value, object and array (each
// `name ::= ...` on its own line). Rule names are exactly those.
std::string_view JsonPrimitiveRules();

// A whole grammar: root ::= value, plus JsonPrimitiveRules().
std::string AnyJsonGbnf();

}  // namespace niels::daemon::grammar
