#include "daemon/text/jinja/evaluator.h"

#include "daemon/text/jinja/builtins.h"
#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/py_format.h"

namespace niels::daemon::text::jinja {
namespace {

// Sets a JinjaError's position to `pos` when the thrower did not know one.
template <typename F>
auto WithPos(SourcePos pos, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (JinjaError& e) {
    e.SetPosIfUnknown(pos);
    throw;
  }
}

}  // namespace

void CheckNamespaceValue(const Value& value, SourcePos pos) {
  if (value.HoldsObject()) {
    ThrowRender("a namespace attribute cannot hold a namespace or loop object (nielsd keeps values acyclic)", pos);
  }
}

// Counts the evaluator's recursion (RAII); past kMaxEvalDepth the render stops.
class Evaluator::RecursionGuard {
 public:
  RecursionGuard(Evaluator& ev, SourcePos pos) : ev_(ev) {
    if (++ev_.eval_depth_ > kMaxEvalDepth) {
      --ev_.eval_depth_;
      ThrowLimit("the render recurses deeper than " + std::to_string(kMaxEvalDepth) + " levels", pos);
    }
  }
  ~RecursionGuard() { --ev_.eval_depth_; }

 private:
  Evaluator& ev_;
};

const Value* Frame::Lookup(std::string_view name) const {
  for (const Frame* f = this; f != nullptr; f = f->parent_.get()) {
    for (auto it = f->vars_.rbegin(); it != f->vars_.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
  }
  return nullptr;
}

void Frame::Set(std::string_view name, Value value) {
  for (auto& [key, v] : vars_) {
    if (key == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

void Evaluator::Render(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out) {
  Exec(body, frame, out);
}

void Evaluator::Charge(int64_t work) {
  work_ += work;
  if (work_ > limits_.max_work) {
    ThrowLimit("the render needs more than " + std::to_string(limits_.max_work) + " work units");
  }
}

void Evaluator::CheckString(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    ThrowLimit("a string of " + std::to_string(bytes) + " bytes passes the limit of " +
               std::to_string(limits_.max_output_bytes));
  }
  Charge(static_cast<int64_t>(bytes));
}

void Evaluator::CheckList(size_t items) {
  if (items > limits_.max_list_items) {
    ThrowLimit("a list of " + std::to_string(items) + " items passes the limit of " +
               std::to_string(limits_.max_list_items));
  }
  Charge(static_cast<int64_t>(items));
}

void Evaluator::CountLoopIteration() {
  if (++loop_iterations_ > limits_.max_loop_iterations) {
    ThrowLimit("the render runs more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations");
  }
}

void Evaluator::EnterCall() {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    ThrowLimit("macro calls nest deeper than " + std::to_string(limits_.max_call_depth));
  }
}

void Evaluator::Append(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    ThrowLimit("the output passes the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  Charge(static_cast<int64_t>(text.size()));
  out.append(text);
}

std::string Evaluator::Str(const Value& v) {
  std::string s = PyStr(v, limits_.max_output_bytes);
  Charge(static_cast<int64_t>(s.size()));
  return s;
}

// ---------------------------------------------------------------------------------------------
// Statements

Evaluator::Flow Evaluator::Exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out) {
  for (const auto& s : body) {
    const Flow flow = ExecStmt(*s, frame, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::ExecStmt(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out) {
  Charge(1);
  RecursionGuard guard(*this, s.pos);
  switch (s.kind) {
    case Stmt::Kind::kText:
      Append(out, s.text);
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      const Value v = Eval(*s.expr, frame);
      Append(out, WithPos(s.pos, [&] { return Str(v); }));
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (const auto& [test, body] : s.branches) {
        if (Eval(*test, frame).Truthy()) return Exec(body, frame, out);
      }
      return Exec(s.else_body, frame, out);
    case Stmt::Kind::kFor:
      return ExecFor(s, frame, out);
    case Stmt::Kind::kSet:
      ExecSet(s, frame, Eval(*s.expr, frame));
      return Flow::kNormal;
    case Stmt::Kind::kSetBlock:
    case Stmt::Kind::kFilterBlock: {
      std::string captured;
      Exec(s.body, std::make_shared<Frame>(frame), captured);
      Value value(std::move(captured));
      if (s.filter) value = EvalFilter(*s.filter, frame, &value);
      if (s.kind == Stmt::Kind::kSetBlock) {
        ExecSet(s, frame, std::move(value));
      } else {
        Append(out, WithPos(s.pos, [&] { return Str(value); }));
      }
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      frame->Set(s.name, MakeMacro(s, frame));
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock: {
      CallArgs args = EvalArgs(*s.expr, frame);
      args.keyword.emplace_back("caller", MakeMacro(s, frame));
      const Value callee = Eval(*s.expr->a, frame);
      const Value result = WithPos(s.expr->pos, [&] { return Call(callee, args); });
      Append(out, WithPos(s.pos, [&] { return Str(result); }));
      return Flow::kNormal;
    }
    case Stmt::Kind::kWith: {
      auto inner = std::make_shared<Frame>(frame);
      for (const auto& [name, expr] : s.assignments) inner->Set(name, Eval(*expr, frame));
      return Exec(s.body, inner, out);
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kScope:
      return Exec(s.body, frame, out);
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out) {
  const Value iterable = Eval(*s.expr, frame);
  std::vector<Value> items = WithPos(s.expr->pos, [&] { return Iterate(iterable); });
  if (s.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      CountLoopIteration();
      auto test_frame = std::make_shared<Frame>(frame);
      ExecSet(s, test_frame, item);
      if (Eval(*s.filter, test_frame).Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto shared_items = std::make_shared<const std::vector<Value>>(std::move(items));
  for (size_t i = 0; i < shared_items->size(); ++i) {
    CountLoopIteration();
    auto iter_frame = std::make_shared<Frame>(frame);
    WithPos(s.pos, [&] { ExecSet(s, iter_frame, (*shared_items)[i]); });
    auto loop = std::make_shared<Object>();
    loop->type_name = "LoopContext";
    loop->loop_items = shared_items;
    loop->loop_index = i;
    iter_frame->Set("loop", Value(std::move(loop)));
    if (Exec(s.body, iter_frame, out) == Flow::kBreak) break;
  }
  if (shared_items->empty() && !s.else_body.empty()) {
    Exec(s.else_body, std::make_shared<Frame>(frame), out);
  }
  return Flow::kNormal;
}

void Evaluator::ExecSet(const Stmt& s, const std::shared_ptr<Frame>& frame, Value value) {
  const Target& t = s.target;
  switch (t.kind) {
    case Target::Kind::kName:
      frame->Set(t.names[0], std::move(value));
      return;
    case Target::Kind::kTuple: {
      std::vector<Value> parts = WithPos(s.pos, [&] { return Iterate(value); });
      if (parts.size() != t.names.size()) {
        ThrowRender(parts.size() > t.names.size()
                        ? "too many values to unpack (expected " + std::to_string(t.names.size()) + ")"
                        : "not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " +
                              std::to_string(parts.size()) + ")",
                    s.pos);
      }
      for (size_t i = 0; i < parts.size(); ++i) frame->Set(t.names[i], std::move(parts[i]));
      return;
    }
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = frame->Lookup(t.names[0]);
      if (ns == nullptr || !ns->is_object() || !ns->as_object().writable) {
        ThrowRender("cannot assign attribute on non-namespace object", s.pos);
      }
      CheckNamespaceValue(value, s.pos);
      ns->as_object().attributes.Set(Value(t.attr), std::move(value));
      return;
    }
  }
}

Value Evaluator::MakeMacro(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  auto callable = std::make_shared<Callable>();
  callable->name = s.kind == Stmt::Kind::kMacro ? s.name : "caller";
  std::weak_ptr<Frame> defined_in = frame;
  if (macro_frames_.empty() || macro_frames_.back() != frame) macro_frames_.push_back(frame);
  const Stmt* stmt = &s;
  callable->fn = [stmt, defined_in](Evaluator& ev, CallArgs& args) -> Value {
    ev.EnterCall();
    struct Leave {
      Evaluator& ev;
      ~Leave() { ev.LeaveCall(); }
    } leave{ev};
    auto mframe = std::make_shared<Frame>(defined_in.lock());
    std::vector<bool> bound(stmt->params.size(), false);
    const size_t n_params = stmt->params.size();
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < n_params) {
        mframe->Set(stmt->params[i].name, std::move(args.positional[i]));
        bound[i] = true;
      } else {
        varargs.push_back(std::move(args.positional[i]));
      }
    }
    Value kwargs = Value::MakeDict();
    for (auto& [key, value] : args.keyword) {
      bool matched = false;
      for (size_t i = 0; i < n_params; ++i) {
        if (stmt->params[i].name == key) {
          if (bound[i]) ThrowRender("macro '" + stmt->name + "' got multiple values for argument '" + key + "'");
          mframe->Set(key, std::move(value));
          bound[i] = matched = true;
          break;
        }
      }
      if (matched) continue;
      if (key == "caller") {
        mframe->Set("caller", std::move(value));
      } else {
        kwargs.mutable_dict().Set(Value(key), std::move(value));
      }
    }
    for (size_t i = 0; i < n_params; ++i) {
      if (bound[i]) continue;
      const MacroParam& p = stmt->params[i];
      mframe->Set(p.name, p.default_value ? ev.Eval(*p.default_value, mframe)
                                          : Value::MakeUndefined("parameter '" + p.name + "' was not provided"));
    }
    mframe->Set("varargs", Value::MakeList(std::move(varargs), /*tuple=*/true));
    mframe->Set("kwargs", std::move(kwargs));
    std::string out;
    ev.Exec(stmt->body, mframe, out);
    return Value(std::move(out));
  };
  return Value(std::move(callable));
}

// ---------------------------------------------------------------------------------------------
// Expressions

Value Evaluator::Eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  Charge(1);
  RecursionGuard guard(*this, e.pos);
  return WithPos(e.pos, [&] { return EvalInner(e, frame); });
}

CallArgs Evaluator::EvalArgs(const Expr& e, const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  args.positional.reserve(e.args.size());
  for (const auto& a : e.args) args.positional.push_back(Eval(*a, frame));
  for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, Eval(*value, frame));
  return args;
}

Value Evaluator::Call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) ThrowRender(callee.undefined_hint());
  if (!callee.is_callable()) ThrowRender("'" + callee.TypeName() + "' object is not callable");
  return callee.as_callable()->fn(*this, args);
}

Value Evaluator::EvalCall(const Expr& e, const std::shared_ptr<Frame>& frame) {
  if (e.a->kind == Expr::Kind::kGetattr) {
    const Value obj = Eval(*e.a->a, frame);
    CallArgs args = EvalArgs(e, frame);
    return CallMethod(*this, obj, e.a->name, args);
  }
  const Value callee = Eval(*e.a, frame);
  CallArgs args = EvalArgs(e, frame);
  return Call(callee, args);
}

Value Evaluator::EvalFilter(const Expr& e, const std::shared_ptr<Frame>& frame, const Value* input) {
  Value base;
  if (e.a == nullptr) {
    if (input == nullptr) ThrowRender("filter without input");
    base = *input;
  } else if (e.a->kind == Expr::Kind::kFilter && input != nullptr) {
    base = EvalFilter(*e.a, frame, input);
  } else {
    base = Eval(*e.a, frame);
  }
  if (e.unknown) ThrowRender("No filter named '" + e.name + "' found.", e.pos);
  CallArgs args = EvalArgs(e, frame);
  return WithPos(e.pos, [&] { return ApplyFilter(*this, e.name, base, args); });
}

Value Evaluator::EvalCompare(const Expr& e, const std::shared_ptr<Frame>& frame) {
  Value left = Eval(*e.a, frame);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.args[i], frame);
    const std::string& op = e.ops[i];
    bool result;
    if (op == "in" || op == "notin") {
      CallArgs args;
      args.positional.push_back(right);
      result = ApplyTest(*this, "in", left, args) == (op == "in");
    } else if (op == "==" || op == "!=") {
      if (left.is_undefined() && right.is_undefined()) {
        result = op == "==";
      } else {
        result = Equal(left, right) == (op == "==");
      }
    } else {
      result = Compare(op, left, right);
    }
    if (!result) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Evaluator::EvalInner(const Expr& e, const std::shared_ptr<Frame>& frame) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName: {
      const Value* v = frame->Lookup(e.name);
      return v ? *v : Value::MakeUndefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::kGetattr:
      return GetAttr(*this, Eval(*e.a, frame), e.name);
    case Expr::Kind::kGetitem: {
      const Value obj = Eval(*e.a, frame);
      if (e.b->kind == Expr::Kind::kSlice) {
        const Expr& s = *e.b;
        auto bound = [&](const ExprPtr& p) { return p ? Eval(*p, frame) : Value::MakeNone(); };
        return GetSlice(*this, obj, bound(s.a), bound(s.b), bound(s.c));
      }
      return GetItem(*this, obj, Eval(*e.b, frame));
    }
    case Expr::Kind::kSlice:
      ThrowRender("a slice outside of []");
    case Expr::Kind::kCall:
      return EvalCall(e, frame);
    case Expr::Kind::kFilter:
      return EvalFilter(e, frame, nullptr);
    case Expr::Kind::kTest: {
      const Value input = Eval(*e.a, frame);
      if (e.unknown) ThrowRender("No test named '" + e.name + "' found.");
      CallArgs args = EvalArgs(e, frame);
      return Value(ApplyTest(*this, e.name, input, args));
    }
    case Expr::Kind::kNot:
      return Value(!Eval(*e.a, frame).Truthy());
    case Expr::Kind::kNeg:
      return Negate(Eval(*e.a, frame));
    case Expr::Kind::kPos: {
      Value v = Eval(*e.a, frame);
      if (v.is_undefined()) ThrowRender(v.undefined_hint());
      if (!v.is_number()) ThrowRender("bad operand type for unary +: '" + v.TypeName() + "'");
      return v.is_bool() ? Value(int64_t{v.as_bool()}) : v;
    }
    case Expr::Kind::kBinary: {
      const Value a = Eval(*e.a, frame);
      const Value b = Eval(*e.b, frame);
      return BinaryOp(*this, e.name, a, b);
    }
    case Expr::Kind::kAnd: {
      Value a = Eval(*e.a, frame);
      return a.Truthy() ? Eval(*e.b, frame) : a;
    }
    case Expr::Kind::kOr: {
      Value a = Eval(*e.a, frame);
      return a.Truthy() ? a : Eval(*e.b, frame);
    }
    case Expr::Kind::kConcat: {
      std::string s;
      for (const auto& part : e.args) {
        s += Str(Eval(*part, frame));
        CheckString(s.size());
      }
      return Value(std::move(s));
    }
    case Expr::Kind::kCompare:
      return EvalCompare(e, frame);
    case Expr::Kind::kCondExpr:
      if (Eval(*e.a, frame).Truthy()) return Eval(*e.b, frame);
      if (e.c) return Eval(*e.c, frame);
      return Value::MakeUndefined("the inline if-expression evaluated to false and no else section was defined.");
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(Eval(*a, frame));
      return Value::MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Value dict = Value::MakeDict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value key = Eval(*e.args[i], frame);
        if (!Dict::IsHashableKey(key)) ThrowRender("unhashable type: '" + key.TypeName() + "'");
        dict.mutable_dict().Set(key, Eval(*e.args[i + 1], frame));
      }
      return dict;
    }
  }
  ThrowRender("unknown expression");
}

}  // namespace niels::daemon::text::jinja
