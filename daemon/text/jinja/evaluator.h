#pragma once
// Evaluator: renders a parsed template (ast.h) with Jinja2's semantics.
//
// Scoping follows Jinja2: a `for` loop iteration, a macro call, a call block and `with` open a new
// scope; `if` does not. `set` writes to the innermost scope (so a value set inside a loop is gone
// after it, the reason templates use `namespace()`); names are looked up from the innermost scope
// outwards, then in the context, then in the globals.
//
// Limits (RenderLimits) are checked as the render runs; passing one stops it with a kLimit
// JinjaError. One Evaluator serves one render on one thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/text/jinja/ast.h"
#include "daemon/text/jinja/render_limits.h"
#include "daemon/text/jinja/value.h"

namespace niels::daemon::text::jinja {

// A scope: variables set in it, and the scope around it.
class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> parent) : parent_(std::move(parent)) {}

  // The innermost binding of `name` in this frame or its parents, or nullptr.
  const Value* Lookup(std::string_view name) const;
  // Binds `name` in this frame.
  void Set(std::string_view name, Value value);
  const std::shared_ptr<Frame>& parent() const { return parent_; }

 private:
  std::shared_ptr<Frame> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

class Evaluator {
 public:
  // Deepest recursion of Eval/Exec in one render (about 1 KB of stack per level; more under ASan).
  static constexpr int kMaxEvalDepth = 1000;

  Evaluator(const RenderLimits& limits, std::chrono::system_clock::time_point now) : limits_(limits), now_(now) {}

  // Renders `body` in `frame` into `out`. Throws JinjaError.
  void Render(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);

  // --- For the builtins -----------------------------------------------------------------------
  Value Eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  // Calls a callable value (Undefined: UndefinedError; other values: "not callable").
  Value Call(const Value& callee, CallArgs& args);
  // str(v), within the output limit.
  std::string Str(const Value& v);
  // The elements a for loop sees: list items, dict keys, str characters; Undefined is empty;
  // anything else is a TypeError.
  std::vector<Value> Iterate(const Value& v);
  // Python ==.
  bool Equal(const Value& a, const Value& b);
  // Python <, <=, >, >= (op is the operator text); TypeError for unordered kinds.
  bool Less(const Value& a, const Value& b);
  bool Compare(const std::string& op, const Value& a, const Value& b);
  // Throws a kLimit error when a string of `bytes` or a list of `items` would pass the limits,
  // and charges the work.
  void CheckString(size_t bytes);
  void CheckList(size_t items);
  void Charge(int64_t work);
  const RenderLimits& limits() const { return limits_; }
  std::chrono::system_clock::time_point now() const { return now_; }
  void CountLoopIteration();
  // Macro nesting (RAII in the caller): throws past max_call_depth.
  void EnterCall();
  void LeaveCall() { --call_depth_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  class RecursionGuard;

  Flow Exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow ExecStmt(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out);
  void ExecSet(const Stmt& s, const std::shared_ptr<Frame>& frame, Value value);
  // A macro (or a call block's `caller`) defined by `s` in `frame`.
  Value MakeMacro(const Stmt& s, const std::shared_ptr<Frame>& frame);
  void Append(std::string& out, std::string_view text);

  Value EvalInner(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value EvalCall(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value EvalFilter(const Expr& e, const std::shared_ptr<Frame>& frame, const Value* input);
  Value EvalCompare(const Expr& e, const std::shared_ptr<Frame>& frame);
  CallArgs EvalArgs(const Expr& e, const std::shared_ptr<Frame>& frame);

  RenderLimits limits_;
  std::chrono::system_clock::time_point now_;
  int64_t work_ = 0;
  int64_t loop_iterations_ = 0;
  int call_depth_ = 0;
  // Recursion of Eval and Exec (expressions and blocks, through macro calls): bounded so that a
  // render never overflows the stack (the parser bounds one template's depth, max_call_depth the
  // macro nesting; this bounds their product).
  int eval_depth_ = 0;
  // The scopes macros were defined in. Macros hold them weakly (a scope holds its macros), and
  // this keeps them alive until the render ends.
  std::vector<std::shared_ptr<Frame>> macro_frames_;
};

// Namespaces are the only mutable values; keeping namespace and loop objects out of their
// attributes keeps every value acyclic and its nesting bounded (see List). Throws otherwise.
void CheckNamespaceValue(const Value& value, SourcePos pos = {});

// Python's binary operators on values: + - * / // % ** (op is the operator text), and unary -.
// TypeError, ZeroDivisionError and int64 overflow are render errors.
Value BinaryOp(Evaluator& ev, const std::string& op, const Value& a, const Value& b);
Value Negate(const Value& a);

}  // namespace niels::daemon::text::jinja
