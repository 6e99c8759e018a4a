#pragma once
// Parser: tokens -> syntax tree, with Jinja2's grammar (jinja2/parser.py) for the statements chat
// templates use: if/elif/else, for (with else, loop filter), set (expression, namespace
// attribute, block), macro, call, filter, with, break/continue (the loopcontrols extension),
// print, and transformers' generation block; raw is handled by the lexer.
//
// Expressions follow Jinja2's precedence: conditional `a if b else c` < or < and < not <
// comparisons (chained; in, not in) < + - < ~ < * / // % < ** < unary - + < filters and `is`
// tests < postfix (.attr, [index or slice], call) < literals, names, parentheses.
//
// A filter name that is not a known builtin is a syntax error, except inside an `if` or a
// conditional expression, where Jinja2 reports it only if it is evaluated; so are unknown tests.
// Not supported (syntax error naming the tag): extends, block, include, import, from, autoescape,
// recursive loops, *args / **kwargs in calls.
//
// Errors: JinjaError kSyntax with the position; kLimit when nesting passes max_depth.

#include <string_view>
#include <vector>

#include "daemon/text/jinja/ast.h"
#include "daemon/text/jinja/lexer.h"

namespace niels::daemon::text::jinja {

struct ParserOptions {
  // Deepest nesting of expressions plus statements (brackets, operators, blocks).
  int max_depth = 64;
};

// The template's top-level statements. Throws JinjaError.
Body Parse(const std::vector<Token>& tokens, const ParserOptions& options);

}  // namespace niels::daemon::text::jinja
