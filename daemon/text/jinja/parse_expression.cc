// The expression half of the parser (parser_impl.h): Jinja2's precedence from conditional
// expressions down to literals, filters, tests, calls and subscripts.
#include "daemon/text/jinja/parser_impl.h"

namespace niels::daemon::text::jinja::parser_internal {

bool Parser::IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
  const Type t = Current().type;
  if (t == Type::kVarEnd || t == Type::kBlockEnd || (t == Type::kOperator && Current().text == ")")) return true;
  for (std::string_view e : extra_end) {
    if (IsName(e)) return true;
  }
  return false;
}

// Expressions separated by commas (a tuple) or one expression.
ExprPtr Parser::ParseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                           bool explicit_parentheses) {
  const SourcePos pos = Current().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) ExpectOp(",");
    if (IsTupleEnd(extra_end)) break;
    items.push_back(ParseExpression(with_condexpr));
    if (IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) Fail("Expected an expression, got '" + Describe(Current()) + "'");
  }
  ExprPtr e = NewExpr(Expr::Kind::kTuple, pos);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::ParseExpression(bool with_condexpr) { return with_condexpr ? ParseCondExpr() : ParseOr(); }

ExprPtr Parser::ParseCondExpr() {
  ChainDepth chain(this);
  DepthGuard guard(this);
  const SourcePos pos = Current().pos;
  // Jinja2 parses the whole conditional expression in a soft frame only once it sees `if`; the
  // first operand was already checked by then (as here: soft_ is set after it).
  ExprPtr expr = ParseOr();
  while (IsName("if")) {
    chain.Link();
    SoftScope soft(this, true);
    Next();
    ExprPtr e = NewExpr(Expr::Kind::kCondExpr, pos);
    e->a = ParseOr();
    if (SkipName("else")) e->c = ParseCondExpr();
    e->b = std::move(expr);
    expr = std::move(e);
  }
  return expr;
}

ExprPtr Parser::ParseBinaryChain(Expr::Kind kind, std::string_view keyword, ExprPtr (Parser::*next)()) {
  ChainDepth chain(this);
  ExprPtr left = (this->*next)();
  while (IsName(keyword)) {
    chain.Link();
    const SourcePos pos = Next().pos;
    ExprPtr e = NewExpr(kind, pos);
    e->a = std::move(left);
    e->b = (this->*next)();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::ParseOr() { return ParseBinaryChain(Expr::Kind::kOr, "or", &Parser::ParseAnd); }

ExprPtr Parser::ParseAnd() { return ParseBinaryChain(Expr::Kind::kAnd, "and", &Parser::ParseNot); }

ExprPtr Parser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(this);
    ExprPtr e = NewExpr(Expr::Kind::kNot, Next().pos);
    e->a = ParseNot();
    return e;
  }
  return ParseCompare();
}

ExprPtr Parser::ParseCompare() {
  const SourcePos pos = Current().pos;
  ExprPtr first = ParseMath1();
  ExprPtr e;
  while (true) {
    std::string op;
    if (Current().type == Type::kOperator &&
        (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
      op = Next().text;
    } else if (SkipName("in")) {
      op = "in";
    } else if (IsName("not") && Look().type == Type::kName && Look().text == "in") {
      Next();
      Next();
      op = "notin";
    } else {
      break;
    }
    if (!e) {
      e = NewExpr(Expr::Kind::kCompare, pos);
      e->a = std::move(first);
    }
    e->ops.push_back(op);
    e->args.push_back(ParseMath1());
  }
  return e ? std::move(e) : std::move(first);
}

ExprPtr Parser::ParseMath1() {
  ChainDepth chain(this);
  ExprPtr left = ParseConcat();
  while (IsOp("+") || IsOp("-")) {
    chain.Link();
    const Token& t = Next();
    ExprPtr e = NewExpr(Expr::Kind::kBinary, t.pos);
    e->name = t.text;
    e->a = std::move(left);
    e->b = ParseConcat();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::ParseConcat() {
  const SourcePos pos = Current().pos;
  ExprPtr first = ParseMath2();
  if (!IsOp("~")) return first;
  ExprPtr e = NewExpr(Expr::Kind::kConcat, pos);
  e->args.push_back(std::move(first));
  while (SkipOp("~")) e->args.push_back(ParseMath2());
  return e;
}

ExprPtr Parser::ParseMath2() {
  ChainDepth chain(this);
  ExprPtr left = ParsePow();
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    chain.Link();
    const Token& t = Next();
    ExprPtr e = NewExpr(Expr::Kind::kBinary, t.pos);
    e->name = t.text;
    e->a = std::move(left);
    e->b = ParsePow();
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::ParsePow() {
  ChainDepth chain(this);
  ExprPtr left = ParseUnary(true);
  while (IsOp("**")) {
    chain.Link();
    const Token& t = Next();
    ExprPtr e = NewExpr(Expr::Kind::kBinary, t.pos);
    e->name = "**";
    e->a = std::move(left);
    e->b = ParseUnary(true);
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(this);
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Token& t = Next();
    node = NewExpr(t.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, t.pos);
    node->a = ParseUnary(false);
  } else {
    node = ParsePrimary();
  }
  node = ParsePostfix(std::move(node));
  if (with_filter) node = ParseFilterExpr(std::move(node));
  return node;
}

ExprPtr Parser::ParsePrimary() {
  const Token& t = Current();
  ExprPtr e;
  switch (t.type) {
    case Type::kName: {
      e = NewExpr(Expr::Kind::kLiteral, t.pos);
      if (t.text == "true" || t.text == "True") {
        e->literal = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->literal = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value::MakeNone();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      Next();
      return e;
    }
    case Type::kString: {
      e = NewExpr(Expr::Kind::kLiteral, t.pos);
      std::string s;
      while (Current().type == Type::kString) s += Next().text;  // adjacent literals join
      e->literal = Value(std::move(s));
      return e;
    }
    case Type::kInt:
    case Type::kFloat:
      e = NewExpr(Expr::Kind::kLiteral, t.pos);
      e->literal = t.type == Type::kInt ? Value(t.int_value) : Value(t.float_value);
      Next();
      return e;
    case Type::kOperator:
      if (t.text == "(") {
        Next();
        e = ParseTuple(true, {}, /*explicit_parentheses=*/true);
        ExpectOp(")");
        return e;
      }
      if (t.text == "[") return ParseList();
      if (t.text == "{") return ParseDict();
      break;
    default:
      break;
  }
  Fail("unexpected '" + Describe(t) + "'");
}

ExprPtr Parser::ParseList() {
  ExprPtr e = NewExpr(Expr::Kind::kList, Next().pos);
  while (!IsOp("]")) {
    if (!e->args.empty()) ExpectOp(",");
    if (IsOp("]")) break;
    e->args.push_back(ParseExpression(true));
  }
  ExpectOp("]");
  return e;
}

ExprPtr Parser::ParseDict() {
  ExprPtr e = NewExpr(Expr::Kind::kDict, Next().pos);
  while (!IsOp("}")) {
    if (!e->args.empty()) ExpectOp(",");
    if (IsOp("}")) break;
    e->args.push_back(ParseExpression(true));
    ExpectOp(":");
    e->args.push_back(ParseExpression(true));
  }
  ExpectOp("}");
  return e;
}

ExprPtr Parser::ParsePostfix(ExprPtr node) {
  ChainDepth chain(this);
  while (IsOp(".") || IsOp("[") || IsOp("(")) {
    chain.Link();
    node = IsOp("(") ? ParseCall(std::move(node)) : ParseSubscript(std::move(node));
  }
  return node;
}

ExprPtr Parser::ParseFilterExpr(ExprPtr node) {
  ChainDepth chain(this);
  while (IsOp("|") || IsName("is") || IsOp("(")) {
    if (IsOp("|")) {
      node = ParseFilterChain(std::move(node), false);  // counts its own links
    } else {
      chain.Link();
      node = IsOp("(") ? ParseCall(std::move(node)) : ParseTest(std::move(node));
    }
  }
  return node;
}

ExprPtr Parser::ParseSubscript(ExprPtr node) {
  const Token& t = Next();
  if (t.text == ".") {
    const Token& attr = Current();
    if (attr.type == Type::kName) {
      ExprPtr e = NewExpr(Expr::Kind::kGetattr, node->pos);
      e->a = std::move(node);
      e->name = Next().text;
      return e;
    }
    if (attr.type != Type::kInt) Fail("expected name or number");
    ExprPtr e = NewExpr(Expr::Kind::kGetitem, node->pos);
    e->a = std::move(node);
    e->b = NewExpr(Expr::Kind::kLiteral, attr.pos);
    e->b->literal = Value(attr.int_value);
    Next();
    return e;
  }
  std::vector<ExprPtr> args;
  while (!IsOp("]")) {
    if (!args.empty()) ExpectOp(",");
    args.push_back(ParseSubscribed());
  }
  ExpectOp("]");
  ExprPtr e = NewExpr(Expr::Kind::kGetitem, node->pos);
  e->a = std::move(node);
  if (args.size() == 1) {
    e->b = std::move(args[0]);
  } else {
    e->b = NewExpr(Expr::Kind::kTuple, t.pos);
    e->b->args = std::move(args);
  }
  return e;
}

// An index or a slice start:stop:step.
ExprPtr Parser::ParseSubscribed() {
  const SourcePos pos = Current().pos;
  ExprPtr start;
  if (!IsOp(":")) {
    start = ParseExpression(true);
    if (!IsOp(":")) return start;
  }
  Next();  // ':'
  ExprPtr e = NewExpr(Expr::Kind::kSlice, pos);
  e->a = std::move(start);
  if (!IsOp(":") && !IsOp("]") && !IsOp(",")) e->b = ParseExpression(true);
  if (SkipOp(":")) {
    if (!IsOp("]") && !IsOp(",")) e->c = ParseExpression(true);
  }
  return e;
}

void Parser::ParseCallArgs(Expr& e) {
  ExpectOp("(");
  bool require_comma = false;
  while (!IsOp(")")) {
    if (require_comma) {
      ExpectOp(",");
      if (IsOp(")")) break;
    }
    if (IsOp("*") || IsOp("**")) Fail("*args and **kwargs in calls are not supported");
    if (Current().type == Type::kName && Look().type == Type::kOperator && Look().text == "=") {
      std::string key = Next().text;
      Next();
      e.kwargs.emplace_back(std::move(key), ParseExpression(true));
    } else {
      if (!e.kwargs.empty()) Fail("invalid syntax for function call expression");
      e.args.push_back(ParseExpression(true));
    }
    require_comma = true;
  }
  ExpectOp(")");
}

ExprPtr Parser::ParseCall(ExprPtr node) {
  ExprPtr e = NewExpr(Expr::Kind::kCall, node->pos);  // errors point at the callee
  e->a = std::move(node);
  ParseCallArgs(*e);
  return e;
}

// `| name(args)` repeated; with start_inline the first filter has no leading `|`.
ExprPtr Parser::ParseFilterChain(ExprPtr node, bool start_inline) {
  ChainDepth chain(this);
  while (IsOp("|") || start_inline) {
    chain.Link();
    if (!start_inline) Next();
    start_inline = false;
    const SourcePos pos = Current().pos;
    std::string name = ExpectAnyName();
    while (SkipOp(".")) name.append(".").append(ExpectAnyName());
    ExprPtr e = NewExpr(Expr::Kind::kFilter, pos);
    e->a = std::move(node);
    e->name = std::move(name);
    if (!IsKnownFilter(e->name)) {
      if (!soft_) ThrowSyntax("No filter named '" + e->name + "'.", pos);
      e->unknown = true;
    }
    if (IsOp("(")) ParseCallArgs(*e);
    node = std::move(e);
  }
  return node;
}

ExprPtr Parser::ParseTest(ExprPtr node) {
  const SourcePos pos = Next().pos;  // 'is'
  const bool negated = SkipName("not");
  std::string name = ExpectAnyName();
  while (SkipOp(".")) name.append(".").append(ExpectAnyName());
  ExprPtr e = NewExpr(Expr::Kind::kTest, pos);
  e->a = std::move(node);
  e->name = std::move(name);
  if (!IsKnownTest(e->name)) {
    if (!soft_) ThrowSyntax("No test named '" + e->name + "'.", pos);
    e->unknown = true;
  }
  const Type t = Current().type;
  if (IsOp("(")) {
    ParseCallArgs(*e);
  } else if ((t == Type::kName || t == Type::kString || t == Type::kInt || t == Type::kFloat || IsOp("[") ||
              IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) Fail("You cannot chain multiple tests with is");
    e->args.push_back(ParsePostfix(ParsePrimary()));
  }
  if (!negated) return e;
  ExprPtr n = NewExpr(Expr::Kind::kNot, pos);
  n->a = std::move(e);
  return n;
}

}  // namespace niels::daemon::text::jinja::parser_internal
