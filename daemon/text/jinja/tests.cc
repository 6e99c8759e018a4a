// Tests (`x is name`), as Jinja2 3.1's builtins (jinja2/tests.py): boolean callable defined
// divisibleby eq equalto escaped even false filter float ge greaterthan gt in integer iterable le
// lessthan lower lt mapping ne none number odd sameas sequence string test true undefined upper,
// and the operator aliases == != < <= > >=.
#include <cmath>
#include <unordered_set>

#include "daemon/text/jinja/arg_reader.h"
#include "daemon/text/jinja/builtins.h"
#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/evaluator.h"
#include "daemon/text/jinja/py_text.h"

namespace niels::daemon::text::jinja {
namespace {

// Python's `needle in container`.
bool Contains(Evaluator& ev, const Value& container, const Value& needle) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        ThrowRender("'in <string>' requires string as left operand, not " + needle.TypeName());
      }
      return container.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& item : container.as_list().items) {
        if (ev.Equal(item, needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (!Dict::IsHashableKey(needle)) {
        if (needle.is_undefined()) return false;
        ThrowRender("unhashable type: '" + needle.TypeName() + "'");
      }
      return container.as_dict().Find(needle) != nullptr;
    default:
      ThrowRender("argument of type '" + container.TypeName() + "' is not iterable");
  }
}

const std::unordered_set<std::string_view>& TestNames() {
  static const auto* names = new std::unordered_set<std::string_view>{
      "boolean",  "callable", "defined",  "divisibleby", "eq",          "equalto", "escaped", "even",
      "false",    "filter",   "float",    "ge",          "greaterthan", "gt",      "in",      "integer",
      "iterable", "le",       "lessthan", "lower",       "lt",          "mapping", "ne",      "none",
      "number",   "odd",      "sameas",   "sequence",    "string",      "test",    "true",    "undefined",
      "upper",    "==",       "!=",       "<",           "<=",          ">",       ">="};
  return *names;
}

}  // namespace

bool IsKnownTest(std::string_view name) { return TestNames().count(name) != 0; }

bool ApplyTest(Evaluator& ev, std::string_view name, const Value& input, CallArgs& args) {
  ev.Charge(1);
  if (name == "defined") return ArgReader(name, args, {}), !input.is_undefined();
  if (name == "undefined") return ArgReader(name, args, {}), input.is_undefined();
  if (name == "none") return ArgReader(name, args, {}), input.is_none();
  if (name == "boolean") return ArgReader(name, args, {}), input.is_bool();
  if (name == "true") return ArgReader(name, args, {}), input.is_bool() && input.as_bool();
  if (name == "false") return ArgReader(name, args, {}), input.is_bool() && !input.as_bool();
  if (name == "integer") return ArgReader(name, args, {}), input.is_int();
  if (name == "float") return ArgReader(name, args, {}), input.is_float();
  if (name == "number") return ArgReader(name, args, {}), input.is_number();
  if (name == "string") return ArgReader(name, args, {}), input.is_string();
  if (name == "mapping") return ArgReader(name, args, {}), input.is_dict();
  if (name == "callable") return ArgReader(name, args, {}), input.is_callable();
  if (name == "escaped") return ArgReader(name, args, {}), false;
  if (name == "iterable") {
    ArgReader r(name, args, {});
    return input.is_undefined() || input.is_string() || input.is_list() || input.is_dict() ||
           (input.is_object() && input.as_object().loop_items);
  }
  if (name == "sequence") {
    ArgReader r(name, args, {});
    return input.is_undefined() || input.is_string() || input.is_list() || input.is_dict();
  }
  if (name == "lower" || name == "upper") {
    ArgReader r(name, args, {});
    const std::string s = ev.Str(input);
    return name == "lower" ? PyIsLower(s) : PyIsUpper(s);
  }
  if (name == "even" || name == "odd") {
    ArgReader r(name, args, {});
    if (input.is_undefined()) ThrowRender(input.undefined_hint());
    if (!input.is_int() && !input.is_bool()) {
      if (input.is_float()) {
        const double d = input.as_float();
        return std::fmod(std::fabs(d), 2.0) == (name == "even" ? 0.0 : 1.0);
      }
      ThrowRender("unsupported operand type(s) for %: '" + input.TypeName() + "' and 'int'");
    }
    const int64_t v = input.is_bool() ? input.as_bool() : input.as_int();
    return (v % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    ArgReader r(name, args, {"num"});
    return ev.Equal(BinaryOp(ev, "%", input, r.Required(0)), Value(int64_t{0}));  // value % num == 0
  }
  if (name == "filter" || name == "test") {
    ArgReader r(name, args, {});
    return input.is_string() && (name == "filter" ? IsKnownFilter(input.as_string()) : IsKnownTest(input.as_string()));
  }
  if (name == "sameas") {
    ArgReader r(name, args, {"other"});
    return input.SameAs(r.Required(0));
  }
  if (name == "in") {
    ArgReader r(name, args, {"seq"});
    return Contains(ev, r.Required(0), input);
  }
  ArgReader r(name, args, {"other"});
  const Value& other = r.Required(0);
  if (name == "eq" || name == "equalto" || name == "==") return ev.Equal(input, other);
  if (name == "ne" || name == "!=") return !ev.Equal(input, other);
  if (name == "lt" || name == "lessthan" || name == "<") return ev.Compare("<", input, other);
  if (name == "le" || name == "<=") return ev.Compare("<=", input, other);
  if (name == "gt" || name == "greaterthan" || name == ">") return ev.Compare(">", input, other);
  if (name == "ge" || name == ">=") return ev.Compare(">=", input, other);
  ThrowRender("No test named '" + std::string(name) + "' found.");
}

}  // namespace niels::daemon::text::jinja
