#include "daemon/text/jinja/parser.h"

#include "daemon/text/jinja/parser_impl.h"

namespace niels::daemon::text::jinja {
namespace parser_internal {

// Statements until a block tag whose name is in end_tags (left as the current token) or EOF.
Body Parser::Subparse(std::initializer_list<std::string_view> end_tags) {
  Body body;
  while (Current().type != Type::kEof) {
    const Token& t = Current();
    if (t.type == Type::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kText;
      s->pos = t.pos;
      s->text = t.text;
      body.push_back(std::move(s));
      Next();
    } else if (t.type == Type::kVarBegin) {
      Next();
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->pos = Current().pos;
      s->expr = ParseTuple(true, {});
      ExpectType(Type::kVarEnd);
      body.push_back(std::move(s));
    } else if (t.type == Type::kBlockBegin) {
      Next();
      for (std::string_view end : end_tags) {
        if (IsName(end)) return body;
      }
      body.push_back(ParseStatement());
      ExpectType(Type::kBlockEnd);
    } else {
      Fail("unexpected '" + Describe(t) + "'");
    }
  }
  return body;
}

// `:`? `%}` body up to one of end_tags; with drop_needle the end tag's name is consumed.
Body Parser::ParseBody(std::initializer_list<std::string_view> end_tags, const std::string& opened_by,
                       bool drop_needle) {
  SkipOp(":");
  ExpectType(Type::kBlockEnd);
  Body body = Subparse(end_tags);
  if (Current().type == Type::kEof) {
    std::string wanted;
    for (std::string_view e : end_tags) wanted += (wanted.empty() ? "'" : " or '") + std::string(e) + "'";
    Fail("unexpected end of template: looking for " + wanted + " to close '" + opened_by + "'");
  }
  if (drop_needle) Next();
  return body;
}

std::unique_ptr<Stmt> Parser::ParseStatement() {
  DepthGuard guard(this);
  const Token& t = Current();
  if (t.type != Type::kName) Fail("tag name expected");
  auto s = std::make_unique<Stmt>();
  s->pos = t.pos;
  const std::string tag = t.text;
  if (tag == "if") return ParseIf(std::move(s));
  if (tag == "for") return ParseFor(std::move(s));
  if (tag == "set") return ParseSet(std::move(s));
  if (tag == "macro") return ParseMacro(std::move(s));
  if (tag == "call") return ParseCallBlock(std::move(s));
  if (tag == "filter") return ParseFilterBlock(std::move(s));
  if (tag == "with") return ParseWith(std::move(s));
  if (tag == "print") return ParsePrint(std::move(s));
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) Fail("'" + tag + "' outside of a loop");
    Next();
    s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    return s;
  }
  if (tag == "generation") {
    Next();
    s->kind = Stmt::Kind::kScope;
    s->body = ParseBody({"endgeneration"}, tag, true);
    return s;
  }
  for (std::string_view unsupported : {"extends", "block", "include", "import", "from", "autoescape"}) {
    if (tag == unsupported) Fail("the '" + tag + "' tag is not supported in chat templates");
  }
  Fail("Encountered unknown tag '" + tag + "'.");
}

std::unique_ptr<Stmt> Parser::ParseIf(std::unique_ptr<Stmt> s) {
  SoftScope soft(this, true);
  s->kind = Stmt::Kind::kIf;
  Next();
  while (true) {
    ExprPtr test = ParseTuple(false, {});
    Body body = ParseBody({"elif", "else", "endif"}, "if", false);
    s->branches.emplace_back(std::move(test), std::move(body));
    const std::string which = Next().text;
    if (which == "elif") continue;
    if (which == "else") s->else_body = ParseBody({"endif"}, "if", true);
    break;
  }
  return s;
}

std::unique_ptr<Stmt> Parser::ParseFor(std::unique_ptr<Stmt> s) {
  SoftScope soft(this, false);
  s->kind = Stmt::Kind::kFor;
  Next();
  s->target = ParseTarget(/*in_for=*/true);
  ExpectName("in");
  s->expr = ParseTuple(false, {"recursive"});
  if (SkipName("if")) s->filter = ParseExpression(true);
  if (IsName("recursive")) Fail("recursive loops are not supported");
  ++loop_depth_;
  s->body = ParseBody({"endfor", "else"}, "for", false);
  --loop_depth_;
  if (Next().text == "else") s->else_body = ParseBody({"endfor"}, "for", true);
  return s;
}

// Names (a tuple of names in for loops and set), or namespace.attr in set.
Target Parser::ParseTarget(bool in_for) {
  Target target;
  if (!in_for && Current().type == Type::kName && Look().type == Type::kOperator && Look().text == ".") {
    target.kind = Target::Kind::kNamespaceAttr;
    target.names.push_back(Next().text);
    Next();
    target.attr = ExpectAnyName();
    return target;
  }
  while (true) {
    if (Current().type != Type::kName) Fail("can't assign to '" + Describe(Current()) + "'");
    const std::string& n = Current().text;
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None") {
      Fail("can't assign to 'const'");
    }
    target.names.push_back(Next().text);
    if (!SkipOp(",")) break;
    target.kind = Target::Kind::kTuple;
    if (IsName("in") || IsOp("=") || Current().type == Type::kBlockEnd) break;
  }
  return target;
}

std::unique_ptr<Stmt> Parser::ParseSet(std::unique_ptr<Stmt> s) {
  Next();
  s->target = ParseTarget(false);
  if (SkipOp("=")) {
    s->kind = Stmt::Kind::kSet;
    s->expr = ParseTuple(true, {});
    return s;
  }
  s->kind = Stmt::Kind::kSetBlock;
  if (s->target.kind != Target::Kind::kName) Fail("a block set assigns to a single name");
  s->filter = ParseFilterChain(nullptr, false);
  SoftScope soft(this, false);
  s->body = ParseBody({"endset"}, "set", true);
  return s;
}

void Parser::ParseSignature(std::vector<MacroParam>& params) {
  ExpectOp("(");
  while (!IsOp(")")) {
    if (!params.empty()) ExpectOp(",");
    MacroParam p;
    p.name = ExpectAnyName();
    if (SkipOp("=")) {
      p.default_value = ParseExpression(true);
    } else if (!params.empty() && params.back().default_value) {
      Fail("non-default argument follows default argument");
    }
    params.push_back(std::move(p));
  }
  ExpectOp(")");
}

std::unique_ptr<Stmt> Parser::ParseMacro(std::unique_ptr<Stmt> s) {
  SoftScope soft(this, false);
  s->kind = Stmt::Kind::kMacro;
  Next();
  s->name = ExpectAnyName();
  ParseSignature(s->params);
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  s->body = ParseBody({"endmacro"}, "macro", true);
  loop_depth_ = saved_loops;
  return s;
}

std::unique_ptr<Stmt> Parser::ParseCallBlock(std::unique_ptr<Stmt> s) {
  SoftScope soft(this, false);
  s->kind = Stmt::Kind::kCallBlock;
  Next();
  if (IsOp("(")) ParseSignature(s->params);
  s->expr = ParseExpression(true);
  if (s->expr->kind != Expr::Kind::kCall) Fail("expected call");
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  s->body = ParseBody({"endcall"}, "call", true);
  loop_depth_ = saved_loops;
  return s;
}

std::unique_ptr<Stmt> Parser::ParseFilterBlock(std::unique_ptr<Stmt> s) {
  SoftScope soft(this, false);
  s->kind = Stmt::Kind::kFilterBlock;
  Next();
  s->filter = ParseFilterChain(nullptr, true);
  s->body = ParseBody({"endfilter"}, "filter", true);
  return s;
}

std::unique_ptr<Stmt> Parser::ParseWith(std::unique_ptr<Stmt> s) {
  SoftScope soft(this, false);
  s->kind = Stmt::Kind::kWith;
  Next();
  while (Current().type != Type::kBlockEnd) {
    if (!s->assignments.empty()) ExpectOp(",");
    std::string name = ExpectAnyName();
    ExpectOp("=");
    s->assignments.emplace_back(std::move(name), ParseExpression(true));
  }
  s->body = ParseBody({"endwith"}, "with", true);
  return s;
}

std::unique_ptr<Stmt> Parser::ParsePrint(std::unique_ptr<Stmt> s) {
  // {% print a, b %} writes a then b: a text-free sequence of outputs.
  s->kind = Stmt::Kind::kScope;
  Next();
  while (Current().type != Type::kBlockEnd) {
    if (!s->body.empty()) ExpectOp(",");
    auto out = std::make_unique<Stmt>();
    out->kind = Stmt::Kind::kOutput;
    out->pos = Current().pos;
    out->expr = ParseExpression(true);
    s->body.push_back(std::move(out));
  }
  return s;
}

}  // namespace parser_internal

Body Parse(const std::vector<Token>& tokens, const ParserOptions& options) {
  return parser_internal::Parser(tokens, options).ParseTemplate();
}

}  // namespace niels::daemon::text::jinja
