#pragma once
// The parser's class, shared by parser.cc (statements) and parse_expression.cc (expressions).
// Internal to daemon/text/jinja: use Parse() from parser.h.

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/text/jinja/builtins.h"
#include "daemon/text/jinja/parser.h"

namespace niels::daemon::text::jinja::parser_internal {

using Type = Token::Type;

// Recursive descent over the token vector; one Parser per Parse() call.
class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const ParserOptions& options) : tokens_(tokens), options_(options) {}

  Body ParseTemplate() {
    Body body = Subparse({});
    if (Current().type != Type::kEof) Fail("unexpected '" + Describe(Current()) + "'");
    return body;
  }

 private:
  // Counts nesting; the limit stops hostile templates before they exhaust the stack.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > p_->options_.max_depth) {
        ThrowLimit("the template nests deeper than " + std::to_string(p_->options_.max_depth) + " levels",
                   p_->Current().pos);
      }
    }
    ~DepthGuard() { --p_->depth_; }

   private:
    Parser* p_;
  };

  // Counts the links of a chain (`a + b + c`, `x.a.b`, `x|f|g`, `a if b else c if ...`): each makes
  // the tree one level deeper without recursing here, but every walk of the tree (evaluation,
  // destruction) recurses through it. Counted into the same depth as DepthGuard.
  class ChainDepth {
   public:
    explicit ChainDepth(Parser* p) : p_(p) {}
    ~ChainDepth() { p_->depth_ -= links_; }
    void Link() {
      ++links_;
      if (++p_->depth_ > p_->options_.max_depth) {
        ThrowLimit("the template nests deeper than " + std::to_string(p_->options_.max_depth) + " levels",
                   p_->Current().pos);
      }
    }

   private:
    Parser* p_;
    int links_ = 0;
  };

  // Sets soft_ (inside if / conditional expression) for a scope.
  class SoftScope {
   public:
    SoftScope(Parser* p, bool soft) : p_(p), saved_(p->soft_) { p_->soft_ = soft; }
    ~SoftScope() { p_->soft_ = saved_; }

   private:
    Parser* p_;
    bool saved_;
  };

  const Token& Current() const { return tokens_[pos_]; }
  const Token& Look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  const Token& Next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Type::kText:
        return "template data";
      case Type::kVarBegin:
        return "begin of print statement";
      case Type::kVarEnd:
        return "end of print statement";
      case Type::kBlockBegin:
        return "begin of statement block";
      case Type::kBlockEnd:
        return "end of statement block";
      case Type::kString:
        return "string";
      case Type::kInt:
        return "integer";
      case Type::kFloat:
        return "float";
      case Type::kEof:
        return "end of template";
      default:
        return t.text;
    }
  }

  [[noreturn]] void Fail(const std::string& message) const { ThrowSyntax(message, Current().pos); }

  bool IsOp(std::string_view op) const {
    const Token& t = Current();
    return t.type == Type::kOperator && t.text[0] == op[0] && t.text == op;
  }
  bool IsName(std::string_view name) const {
    const Token& t = Current();
    return t.type == Type::kName && t.text[0] == name[0] && t.text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Fail("expected '" + std::string(op) + "', got '" + Describe(Current()) + "'");
  }
  void ExpectName(std::string_view name) {
    if (!SkipName(name)) Fail("expected '" + std::string(name) + "', got '" + Describe(Current()) + "'");
  }
  std::string ExpectAnyName() {
    if (Current().type != Type::kName) Fail("expected a name, got '" + Describe(Current()) + "'");
    return Next().text;
  }
  void ExpectType(Type type) {
    if (Current().type != type) {
      Token want;
      want.type = type;
      Fail("expected '" + Describe(want) + "', got '" + Describe(Current()) + "'");
    }
    Next();
  }

  ExprPtr NewExpr(Expr::Kind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---------------------------------------------------------------------------------------------
  // Statements

  // Statements until a block tag whose name is in end_tags (left as the current token) or EOF.
  Body Subparse(std::initializer_list<std::string_view> end_tags);

  // `:`? `%}` body up to one of end_tags; with drop_needle the end tag's name is consumed.
  Body ParseBody(std::initializer_list<std::string_view> end_tags, const std::string& opened_by, bool drop_needle);
  std::unique_ptr<Stmt> ParseStatement();
  std::unique_ptr<Stmt> ParseIf(std::unique_ptr<Stmt> s);
  std::unique_ptr<Stmt> ParseFor(std::unique_ptr<Stmt> s);

  // Names (a tuple of names in for loops and set), or namespace.attr in set.
  Target ParseTarget(bool in_for);
  std::unique_ptr<Stmt> ParseSet(std::unique_ptr<Stmt> s);
  void ParseSignature(std::vector<MacroParam>& params);
  std::unique_ptr<Stmt> ParseMacro(std::unique_ptr<Stmt> s);
  std::unique_ptr<Stmt> ParseCallBlock(std::unique_ptr<Stmt> s);
  std::unique_ptr<Stmt> ParseFilterBlock(std::unique_ptr<Stmt> s);
  std::unique_ptr<Stmt> ParseWith(std::unique_ptr<Stmt> s);
  std::unique_ptr<Stmt> ParsePrint(std::unique_ptr<Stmt> s);

  // ---------------------------------------------------------------------------------------------
  // Expressions

  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const;

  // Expressions separated by commas (a tuple) or one expression.
  ExprPtr ParseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                     bool explicit_parentheses = false);
  ExprPtr ParseExpression(bool with_condexpr);
  ExprPtr ParseCondExpr();
  ExprPtr ParseBinaryChain(Expr::Kind kind, std::string_view keyword, ExprPtr (Parser::*next)());
  ExprPtr ParseOr();
  ExprPtr ParseAnd();
  ExprPtr ParseNot();
  ExprPtr ParseCompare();
  ExprPtr ParseMath1();
  ExprPtr ParseConcat();
  ExprPtr ParseMath2();
  ExprPtr ParsePow();
  ExprPtr ParseUnary(bool with_filter);
  ExprPtr ParsePrimary();
  ExprPtr ParseList();
  ExprPtr ParseDict();
  ExprPtr ParsePostfix(ExprPtr node);
  ExprPtr ParseFilterExpr(ExprPtr node);
  ExprPtr ParseSubscript(ExprPtr node);

  // An index or a slice start:stop:step.
  ExprPtr ParseSubscribed();
  void ParseCallArgs(Expr& e);
  ExprPtr ParseCall(ExprPtr node);

  // `| name(args)` repeated; with start_inline the first filter has no leading `|`.
  ExprPtr ParseFilterChain(ExprPtr node, bool start_inline);
  ExprPtr ParseTest(ExprPtr node);

  const std::vector<Token>& tokens_;
  ParserOptions options_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool soft_ = false;
};

}  // namespace niels::daemon::text::jinja::parser_internal
