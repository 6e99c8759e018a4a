// Python's operators on values: arithmetic, equality, ordering, iteration (the parts of the
// Evaluator that do not depend on the syntax tree).
#include <cmath>
#include <limits>
#include <optional>

#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/evaluator.h"
#include "daemon/text/jinja/py_text.h"
#include "daemon/text/jinja/str_methods.h"

namespace niels::daemon::text::jinja {
namespace {

[[noreturn]] void Unsupported(const std::string& op, const Value& a, const Value& b) {
  ThrowRender("unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

[[noreturn]] void Overflow() { ThrowRender("integer overflow (nielsd's template integers are 64-bit)"); }

int64_t IntOf(const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); }
bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }

void FailIfUndefined(const Value& a, const Value& b) {
  if (a.is_undefined()) ThrowRender(a.undefined_hint());
  if (b.is_undefined()) ThrowRender(b.undefined_hint());
}

Value Repeat(Evaluator& ev, const Value& seq, int64_t n) {
  const bool empty = seq.is_string() ? seq.as_string().empty() : seq.as_list().items.empty();
  if (n <= 0 || empty) return seq.is_string() ? Value(std::string()) : Value::MakeList({}, seq.as_list().is_tuple);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > ev.limits().max_output_bytes / s.size()) {
      ev.CheckString(ev.limits().max_output_bytes + 1);
    }
    ev.CheckString(s.size() * static_cast<size_t>(n));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > ev.limits().max_list_items / items.size()) {
    ev.CheckList(ev.limits().max_list_items + 1);
  }
  ev.CheckList(items.size() * static_cast<size_t>(n));
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::MakeList(std::move(out), seq.as_list().is_tuple);
}

// Python's float divmod: (floor quotient, remainder with the divisor's sign).
std::pair<double, double> FloatDivmod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

Value IntPow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) ThrowRender("0.0 cannot be raised to a negative power");
    return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) Overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) Overflow();
  }
  return Value(result);
}

Value Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) Unsupported(op, a, b);
  if (IsIntLike(a) && IsIntLike(b)) {
    const int64_t x = IntOf(a), y = IntOf(b);
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) Overflow();
    } else if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) Overflow();
    } else if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) Overflow();
    } else if (op == "/") {
      if (y == 0) ThrowRender("division by zero");
      return Value(static_cast<double>(x) / static_cast<double>(y));
    } else if (op == "//" || op == "%") {
      if (y == 0) ThrowRender(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        if (op == "//") Overflow();
        return Value(int64_t{0});
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      r = op == "//" ? q : m;
    } else {  // **
      return IntPow(x, y);
    }
    return Value(r);
  }
  const double x = a.ToDouble(), y = b.ToDouble();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "/") {
    if (y == 0) ThrowRender("float division by zero");
    return Value(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) ThrowRender(op == "//" ? "float floor division by zero" : "float modulo");
    const auto [q, m] = FloatDivmod(x, y);
    return Value(op == "//" ? q : m);
  }
  if (x == 0 && y < 0) ThrowRender("0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y)) ThrowRender("complex results of ** are not supported");
  return Value(std::pow(x, y));
}

}  // namespace

Value BinaryOp(Evaluator& ev, const std::string& op, const Value& a, const Value& b) {
  if (op == "%" && a.is_string()) return PercentFormat(ev, a.as_string(), b);  // printf-style
  FailIfUndefined(a, b);
  if (op == "+") {
    if (a.is_string() || b.is_string()) {
      if (!a.is_string()) Unsupported(op, a, b);
      if (!b.is_string()) ThrowRender("can only concatenate str (not \"" + b.TypeName() + "\") to str");
      ev.CheckString(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() || b.is_list()) {
      if (!a.is_list()) Unsupported(op, a, b);
      if (!b.is_list() || a.as_list().is_tuple != b.as_list().is_tuple) {
        ThrowRender("can only concatenate " + a.TypeName() + " (not \"" + b.TypeName() + "\") to " + a.TypeName());
      }
      ev.CheckList(a.as_list().items.size() + b.as_list().items.size());
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::MakeList(std::move(items), a.as_list().is_tuple);
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && IsIntLike(b)) return Repeat(ev, a, IntOf(b));
    if ((b.is_string() || b.is_list()) && IsIntLike(a)) return Repeat(ev, b, IntOf(a));
  }
  return Arithmetic(op, a, b);
}

Value Negate(const Value& a) {
  if (a.is_undefined()) ThrowRender(a.undefined_hint());
  if (a.is_float()) return Value(-a.as_float());
  if (IsIntLike(a)) {
    if (IntOf(a) == std::numeric_limits<int64_t>::min()) Overflow();
    return Value(-IntOf(a));
  }
  ThrowRender("bad operand type for unary -: '" + a.TypeName() + "'");
}

bool Evaluator::Equal(const Value& a, const Value& b) {
  Charge(1);
  if (a.is_number() && b.is_number()) {
    if (IsIntLike(a) && IsIntLike(b)) return IntOf(a) == IntOf(b);
    return a.ToDouble() == b.ToDouble();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.items()) {
        const Value* other = y.Find(key);
        if (other == nullptr || !Equal(value, *other)) return false;
      }
      return true;
    }
    default:
      return a.SameAs(b);
  }
}

bool Evaluator::Less(const Value& a, const Value& b) { return Compare("<", a, b); }

bool Evaluator::Compare(const std::string& op, const Value& a, const Value& b) {
  FailIfUndefined(a, b);
  Charge(1);
  auto result = [&](auto x, auto y) {
    if (op == "<") return x < y;
    if (op == "<=") return x <= y;
    if (op == ">") return x > y;
    return x >= y;
  };
  if (a.is_number() && b.is_number()) {
    if (IsIntLike(a) && IsIntLike(b)) return result(IntOf(a), IntOf(b));
    return result(a.ToDouble(), b.ToDouble());
  }
  if (a.is_string() && b.is_string()) return result(a.as_string().compare(b.as_string()), 0);
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equal(x[i], y[i])) return Compare(op, x[i], y[i]);
    }
    return result(x.size(), y.size());
  }
  ThrowRender("'" + op + "' not supported between instances of '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

std::vector<Value> Evaluator::Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      Charge(static_cast<int64_t>(v.as_list().items.size()));
      return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().size());
      for (const auto& [key, value] : v.as_dict().items()) keys.push_back(key);
      Charge(static_cast<int64_t>(keys.size()));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      CheckList(CodePointCount(s));
      for (size_t i = 0; i < s.size();) {
        size_t n;
        CodePointAt(s, i, &n);
        chars.emplace_back(s.substr(i, n));
        i += n;
      }
      Charge(static_cast<int64_t>(chars.size()));
      return chars;
    }
    default:
      ThrowRender("'" + v.TypeName() + "' object is not iterable");
  }
}

}  // namespace niels::daemon::text::jinja
