#pragma once
// Lexer: template source -> tokens, with Jinja2's whitespace control applied to the text tokens.
//
// What it reproduces of Jinja2 3.1's lexer (jinja2/lexer.py), under the environment transformers
// uses (trim_blocks, lstrip_blocks; keep_trailing_newline off):
//   - "\r\n" and "\r" become "\n"; one trailing newline of the source is dropped;
//   - `{%- `, `{{-`, `{#-` strip all whitespace before the tag, ` -%}`, ` -}}`, ` -#}` all
//     whitespace after it; `{%+` keeps the whitespace lstrip_blocks would remove, `+%}` the newline
//     trim_blocks would remove;
//   - lstrip_blocks: spaces and tabs (any whitespace but newlines) from the start of a line up to a
//     block or comment tag are removed; trim_blocks: the first newline after a block or comment tag;
//   - comments vanish, `{% raw %}...{% endraw %}` is text;
//   - in tags: names, strings with Python escapes, ints (0b/0o/0x, `_` separators), floats,
//     operators; `}}` and `%}` end a tag only outside brackets.
// Whitespace is Python's (str.isspace), as Jinja2's regular expressions use it.
//
// Errors (JinjaError kSyntax with the position): invalid UTF-8, an unterminated tag, comment,
// string or raw block, a character that starts no token, unbalanced brackets, a bad escape.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/text/jinja/errors.h"

namespace niels::daemon::text::jinja {

struct Token {
  enum class Type {
    kText,        // template data (text = the data)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword (text)
    kString,      // string literal (text = the decoded value)
    kInt,         // int_value
    kFloat,       // float_value
    kOperator,    // text: "+", "//", "==", "(", ...
    kEof,
  };
  Type type = Type::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

struct LexerOptions {
  bool trim_blocks = true;    // remove the first newline after a block or comment tag
  bool lstrip_blocks = true;  // remove whitespace before a block or comment tag on its line
};

// The tokens of `source`, ending with kEof. Throws JinjaError (kSyntax).
std::vector<Token> Tokenize(std::string_view source, const LexerOptions& options);

}  // namespace niels::daemon::text::jinja
