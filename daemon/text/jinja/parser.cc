#include "daemon/text/jinja/parser.h"

#include <initializer_list>

#include "daemon/text/jinja/builtins.h"

namespace niels::daemon::text::jinja {
namespace {

using Type = Token::Type;

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
      case Type::kText: return "template data";
      case Type::kVarBegin: return "begin of print statement";
      case Type::kVarEnd: return "end of print statement";
      case Type::kBlockBegin: return "begin of statement block";
      case Type::kBlockEnd: return "end of statement block";
      case Type::kString: return "string";
      case Type::kInt: return "integer";
      case Type::kFloat: return "float";
      case Type::kEof: return "end of template";
      default: return t.text;
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
  Body Subparse(std::initializer_list<std::string_view> end_tags) {
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
  Body ParseBody(std::initializer_list<std::string_view> end_tags, const std::string& opened_by,
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

  std::unique_ptr<Stmt> ParseStatement() {
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

  std::unique_ptr<Stmt> ParseIf(std::unique_ptr<Stmt> s) {
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

  std::unique_ptr<Stmt> ParseFor(std::unique_ptr<Stmt> s) {
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
  Target ParseTarget(bool in_for) {
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

  std::unique_ptr<Stmt> ParseSet(std::unique_ptr<Stmt> s) {
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

  void ParseSignature(std::vector<MacroParam>& params) {
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

  std::unique_ptr<Stmt> ParseMacro(std::unique_ptr<Stmt> s) {
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

  std::unique_ptr<Stmt> ParseCallBlock(std::unique_ptr<Stmt> s) {
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

  std::unique_ptr<Stmt> ParseFilterBlock(std::unique_ptr<Stmt> s) {
    SoftScope soft(this, false);
    s->kind = Stmt::Kind::kFilterBlock;
    Next();
    s->filter = ParseFilterChain(nullptr, true);
    s->body = ParseBody({"endfilter"}, "filter", true);
    return s;
  }

  std::unique_ptr<Stmt> ParseWith(std::unique_ptr<Stmt> s) {
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

  std::unique_ptr<Stmt> ParsePrint(std::unique_ptr<Stmt> s) {
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

  // ---------------------------------------------------------------------------------------------
  // Expressions

  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
    const Type t = Current().type;
    if (t == Type::kVarEnd || t == Type::kBlockEnd || (t == Type::kOperator && Current().text == ")")) return true;
    for (std::string_view e : extra_end) {
      if (IsName(e)) return true;
    }
    return false;
  }

  // Expressions separated by commas (a tuple) or one expression.
  ExprPtr ParseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                     bool explicit_parentheses = false) {
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

  ExprPtr ParseExpression(bool with_condexpr) { return with_condexpr ? ParseCondExpr() : ParseOr(); }

  ExprPtr ParseCondExpr() {
    DepthGuard guard(this);
    const SourcePos pos = Current().pos;
    // Jinja2 parses the whole conditional expression in a soft frame only once it sees `if`; the
    // first operand was already checked by then (as here: soft_ is set after it).
    ExprPtr expr = ParseOr();
    while (IsName("if")) {
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

  ExprPtr ParseBinaryChain(Expr::Kind kind, std::string_view keyword, ExprPtr (Parser::*next)()) {
    ExprPtr left = (this->*next)();
    while (IsName(keyword)) {
      const SourcePos pos = Next().pos;
      ExprPtr e = NewExpr(kind, pos);
      e->a = std::move(left);
      e->b = (this->*next)();
      left = std::move(e);
    }
    return left;
  }
  ExprPtr ParseOr() { return ParseBinaryChain(Expr::Kind::kOr, "or", &Parser::ParseAnd); }
  ExprPtr ParseAnd() { return ParseBinaryChain(Expr::Kind::kAnd, "and", &Parser::ParseNot); }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      ExprPtr e = NewExpr(Expr::Kind::kNot, Next().pos);
      e->a = ParseNot();
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
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

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& t = Next();
      ExprPtr e = NewExpr(Expr::Kind::kBinary, t.pos);
      e->name = t.text;
      e->a = std::move(left);
      e->b = ParseConcat();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    const SourcePos pos = Current().pos;
    ExprPtr first = ParseMath2();
    if (!IsOp("~")) return first;
    ExprPtr e = NewExpr(Expr::Kind::kConcat, pos);
    e->args.push_back(std::move(first));
    while (SkipOp("~")) e->args.push_back(ParseMath2());
    return e;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& t = Next();
      ExprPtr e = NewExpr(Expr::Kind::kBinary, t.pos);
      e->name = t.text;
      e->a = std::move(left);
      e->b = ParsePow();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      const Token& t = Next();
      ExprPtr e = NewExpr(Expr::Kind::kBinary, t.pos);
      e->name = "**";
      e->a = std::move(left);
      e->b = ParseUnary(true);
      left = std::move(e);
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
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

  ExprPtr ParsePrimary() {
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
      default: break;
    }
    Fail("unexpected '" + Describe(t) + "'");
  }

  ExprPtr ParseList() {
    ExprPtr e = NewExpr(Expr::Kind::kList, Next().pos);
    while (!IsOp("]")) {
      if (!e->args.empty()) ExpectOp(",");
      if (IsOp("]")) break;
      e->args.push_back(ParseExpression(true));
    }
    ExpectOp("]");
    return e;
  }

  ExprPtr ParseDict() {
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

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        node = ParseFilterChain(std::move(node), false);
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
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
  ExprPtr ParseSubscribed() {
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

  void ParseCallArgs(Expr& e) {
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

  ExprPtr ParseCall(ExprPtr node) {
    ExprPtr e = NewExpr(Expr::Kind::kCall, node->pos);  // errors point at the callee
    e->a = std::move(node);
    ParseCallArgs(*e);
    return e;
  }

  // `| name(args)` repeated; with start_inline the first filter has no leading `|`.
  ExprPtr ParseFilterChain(ExprPtr node, bool start_inline) {
    while (IsOp("|") || start_inline) {
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

  ExprPtr ParseTest(ExprPtr node) {
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

  const std::vector<Token>& tokens_;
  ParserOptions options_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool soft_ = false;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens, const ParserOptions& options) {
  return Parser(tokens, options).ParseTemplate();
}

}  // namespace niels::daemon::text::jinja
