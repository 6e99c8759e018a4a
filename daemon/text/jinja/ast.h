#pragma once
// The syntax tree of a parsed template: expressions (Expr) and statements (Stmt), each with the
// source position of its first token. Built by the parser, read by the evaluator; immutable after
// parsing, so one tree can be rendered by several threads at once.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/value.h"

namespace niels::daemon::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kGetattr,   // a.name
    kGetitem,   // a[b]
    kSlice,     // a:b:c inside [] (each may be null)
    kCall,      // a(args, kwargs)
    kFilter,    // a | name(args, kwargs); a is null at the head of a filter block's chain
    kTest,      // a is name(args, kwargs)
    kNot,       // not a
    kNeg,       // -a
    kPos,       // +a
    kBinary,    // a <name> b, name one of + - * / // % **
    kAnd,       // a and b
    kOr,        // a or b
    kConcat,    // args[0] ~ args[1] ~ ...
    kCompare,   // a ops[0] args[0] ops[1] args[1] ... (==, !=, <, <=, >, >=, in, notin)
    kCondExpr,  // b if a else c (c may be null)
    kList,      // [args...]
    kTuple,     // (args...)
    kDict,      // {args[0]: args[1], args[2]: args[3], ...}
  };

  Kind kind;
  SourcePos pos;
  Value literal;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  // For kFilter and kTest: the name was unknown when parsed inside an `if` or conditional
  // expression, where Jinja2 reports it only when it is evaluated.
  bool unknown = false;
};

// An assignment target: a name, names to unpack a sequence into, or namespace.attribute.
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::vector<std::string> names;  // kName: one; kTuple: several; kNamespaceAttr: the namespace
  std::string attr;                // kNamespaceAttr
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (test, body) in order; else_body
    kFor,          // for target in expr [if filter]: body else else_body
    kSet,          // set target = expr
    kSetBlock,     // set target [| filter]: body captured
    kMacro,        // macro name(params): body
    kCallBlock,    // call(params) expr: body (the macro's `caller`)
    kFilterBlock,  // filter filter: body
    kWith,         // with name = value, ...: body
    kBreak,
    kContinue,
    kScope,  // a body rendered in place (transformers' {% generation %})
  };

  Kind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;                                    // kOutput, kFor (iterable), kSet (value), kCallBlock (the call)
  ExprPtr filter;                                  // kFor (loop filter), kSetBlock/kFilterBlock (filter chain)
  Target target;                                   // kFor, kSet, kSetBlock
  std::string name;                                // kMacro
  std::vector<MacroParam> params;                  // kMacro, kCallBlock
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> assignments;  // kWith
};

}  // namespace niels::daemon::text::jinja
