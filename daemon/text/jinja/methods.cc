// Attribute and item access with Jinja2's fallbacks, and the methods of dict and list (str's are
// in str_methods.cc).
//
// dict: get items keys values copy
// list, tuple: index count copy
// Mutating methods (list.append, dict.update, ...) are unsafe in Jinja2's immutable sandbox:
// reading them gives an Undefined that fails when called.
#include <algorithm>
#include <unordered_set>

#include "daemon/text/jinja/arg_reader.h"
#include "daemon/text/jinja/builtins.h"
#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/evaluator.h"
#include "daemon/text/jinja/py_format.h"
#include "daemon/text/jinja/py_text.h"
#include "daemon/text/jinja/str_methods.h"

namespace niels::daemon::text::jinja {
namespace {

const std::unordered_set<std::string_view>& DictMethods() {
  static const auto* names = new std::unordered_set<std::string_view>{"get", "items", "keys", "values", "copy"};
  return *names;
}
const std::unordered_set<std::string_view>& DictMutators() {
  static const auto* names =
      new std::unordered_set<std::string_view>{"clear", "pop", "popitem", "setdefault", "update"};
  return *names;
}
const std::unordered_set<std::string_view>& ListMethods() {
  static const auto* names = new std::unordered_set<std::string_view>{"index", "count", "copy"};
  return *names;
}
const std::unordered_set<std::string_view>& ListMutators() {
  static const auto* names = new std::unordered_set<std::string_view>{"append", "extend",  "insert", "pop",
                                                                      "remove", "reverse", "sort",   "clear"};
  return *names;
}

// Jinja2's name for a value's type in "has no attribute" messages.
std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  return v.TypeName() + " object";
}

Value NoAttribute(const Value& obj, const std::string& name) {
  std::string hint = "'";
  hint.append(ObjectTypeRepr(obj)).append("' has no attribute '").append(name).append("'");
  return Value::MakeUndefined(std::move(hint));
}

Value Unsafe(const Value& obj, const std::string& name) {
  return Value::MakeUndefined("access to attribute '" + name + "' of '" + obj.TypeName() + "' object is unsafe.");
}

Value DictMethod(Evaluator& ev, const Value& d, const std::string& name, CallArgs& args) {
  const Dict& dict = d.as_dict();
  ev.Charge(static_cast<int64_t>(dict.size()));
  if (name == "get") {
    ArgReader r("get", args, {"key", "default"});
    const Value* v = dict.Find(r.Required(0));
    if (v == nullptr && !Dict::IsHashableKey(r.Required(0)) && !r.Required(0).is_undefined()) {
      ThrowRender("unhashable type: '" + r.Required(0).TypeName() + "'");
    }
    return v ? *v : r.Or(1, Value::MakeNone());
  }
  ArgReader r(name, args, {});
  if (name == "copy") {
    Value copy = Value::MakeDict();
    for (const auto& [k, v] : dict.items()) copy.mutable_dict().Set(k, v);
    return copy;
  }
  std::vector<Value> out;
  out.reserve(dict.size());
  for (const auto& [k, v] : dict.items()) {
    if (name == "items") {
      out.push_back(Value::MakeList({k, v}, true));
    } else {
      out.push_back(name == "keys" ? k : v);
    }
  }
  return Value::MakeList(std::move(out));
}

Value ListMethod(Evaluator& ev, const Value& l, const std::string& name, CallArgs& args) {
  if (name == "copy") {
    ArgReader r(name, args, {});
    ev.CheckList(l.as_list().items.size());
    return Value::MakeList(l.as_list().items, l.as_list().is_tuple);
  }
  ArgReader r(name, args, {"value"});
  const auto& items = l.as_list().items;
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!ev.Equal(items[i], r.Required(0))) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") ThrowRender(ev.Str(r.Required(0)) + " is not in list");
  return Value(count);
}

Value BindMethod(const Value& obj, const std::string& name) {
  auto callable = std::make_shared<Callable>();
  callable->name = obj.TypeName() + "." + name;
  callable->fn = [obj, name](Evaluator& ev, CallArgs& args) { return CallMethod(ev, obj, name, args); };
  callable->bound_self = obj;
  return Value(std::move(callable));
}

// Python's index into a sequence of `size` (negative from the end); -1 when out of range.
int64_t NormalizeIndex(int64_t index, size_t size) {
  const auto n = static_cast<int64_t>(size);
  if (index < 0) index += n;
  return index < 0 || index >= n ? -1 : index;
}

Value LoopAttribute(Evaluator& ev, const Object& loop, const std::string& name) {
  const auto& items = *loop.loop_items;
  const auto i = static_cast<int64_t>(loop.loop_index);
  const auto n = static_cast<int64_t>(items.size());
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(int64_t{1});
  if (name == "depth0") return Value(int64_t{0});
  if (name == "previtem") return i > 0 ? items[i - 1] : Value::MakeUndefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? items[i + 1] : Value::MakeUndefined("there is no next item");
  if (name == "cycle") {
    auto callable = std::make_shared<Callable>();
    callable->name = "loop.cycle";
    callable->fn = [i](Evaluator&, CallArgs& args) -> Value {
      if (args.positional.empty()) ThrowRender("no items for cycling given");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    };
    return Value(std::move(callable));
  }
  return Value::MakeUndefined("'LoopContext object' has no attribute '" + name + "'");
}

}  // namespace

Value GetAttr(Evaluator& ev, const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      ThrowRender(obj.undefined_hint());
    case Value::Kind::kString:
      if (IsStrMethod(name)) return BindMethod(obj, name);
      return NoAttribute(obj, name);
    case Value::Kind::kDict: {
      if (DictMethods().count(name)) return BindMethod(obj, name);
      if (DictMutators().count(name)) return Unsafe(obj, name);
      const Value* v = obj.as_dict().Find(std::string_view(name));
      return v ? *v : NoAttribute(obj, name);
    }
    case Value::Kind::kList:
      if (ListMethods().count(name) && !(name == "copy" && obj.as_list().is_tuple)) return BindMethod(obj, name);
      if (!obj.as_list().is_tuple && ListMutators().count(name)) return Unsafe(obj, name);
      return NoAttribute(obj, name);
    case Value::Kind::kObject: {
      const Object& o = obj.as_object();
      if (o.loop_items) return LoopAttribute(ev, o, name);
      const Value* v = o.attributes.Find(std::string_view(name));
      return v ? *v : NoAttribute(obj, name);
    }
    default:
      return NoAttribute(obj, name);
  }
}

Value GetItem(Evaluator& ev, const Value& obj, const Value& key) {
  const bool int_key = key.is_int() || key.is_bool();
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      ThrowRender(obj.undefined_hint());
    case Value::Kind::kDict: {
      const Value* v = obj.as_dict().Find(key);
      if (v) return *v;
      break;
    }
    case Value::Kind::kList:
      if (int_key) {
        const auto& items = obj.as_list().items;
        const int64_t i = NormalizeIndex(key.is_bool() ? key.as_bool() : key.as_int(), items.size());
        if (i >= 0) return items[static_cast<size_t>(i)];
      }
      break;
    case Value::Kind::kString:
      if (int_key) {
        const std::u32string cps = DecodeUtf8(obj.as_string());
        ev.Charge(static_cast<int64_t>(cps.size()));
        const int64_t i = NormalizeIndex(key.is_bool() ? key.as_bool() : key.as_int(), cps.size());
        if (i >= 0) return Value(EncodeUtf8(std::u32string(1, cps[static_cast<size_t>(i)])));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return GetAttr(ev, obj, key.as_string());
  std::string hint = "'";
  hint.append(ObjectTypeRepr(obj)).append("' has no element ").append(PyRepr(key, 1024));
  return Value::MakeUndefined(std::move(hint));
}

Value GetSlice(Evaluator& ev, const Value& obj, const Value& start, const Value& stop, const Value& step) {
  // Jinja2 compiles a slice to Python's own obj[a:b:c], without its getitem fallbacks: every
  // problem is an error.
  if (obj.is_undefined()) ThrowRender(obj.undefined_hint());
  if (obj.is_dict()) ThrowRender("unhashable type: 'slice'");
  if (!obj.is_string() && !obj.is_list()) ThrowRender("'" + obj.TypeName() + "' object is not subscriptable");
  auto bound = [](const Value& v, bool* present) -> int64_t {
    *present = !v.is_none();
    if (!*present) return 0;
    if (v.is_bool()) return v.as_bool();
    if (v.is_int()) return v.as_int();
    if (v.is_undefined()) ThrowRender(v.undefined_hint());
    ThrowRender("slice indices must be integers or None or have an __index__ method");
  };
  bool has_start, has_stop, has_step;
  const int64_t b = bound(start, &has_start), e = bound(stop, &has_stop), s = bound(step, &has_step);
  const int64_t st = has_step ? s : 1;
  if (st == 0) ThrowRender("slice step cannot be zero");
  std::u32string cps;
  if (obj.is_string()) cps = DecodeUtf8(obj.as_string());
  const auto n = static_cast<int64_t>(obj.is_string() ? cps.size() : obj.as_list().items.size());
  ev.Charge(n);
  // Python's slice.indices().
  auto clamp = [&](int64_t v, bool present, int64_t fallback) {
    if (!present) return fallback;
    if (v < 0) v += n;
    if (st > 0) return std::clamp<int64_t>(v, 0, n);
    return std::clamp<int64_t>(v, -1, n - 1);
  };
  const int64_t lo = clamp(b, has_start, st > 0 ? 0 : n - 1);
  const int64_t hi = clamp(e, has_stop, st > 0 ? n : -1);
  std::vector<size_t> picks;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::u32string out;
    for (size_t i : picks) out.push_back(cps[i]);
    return Value(EncodeUtf8(out));
  }
  std::vector<Value> out;
  for (size_t i : picks) out.push_back(obj.as_list().items[i]);
  return Value::MakeList(std::move(out), obj.as_list().is_tuple);
}

Value GetAttrOnly(Evaluator& ev, const Value& obj, const std::string& name) {
  if (obj.is_dict() && !DictMethods().count(name) && !DictMutators().count(name)) return NoAttribute(obj, name);
  return GetAttr(ev, obj, name);
}

Value CallMethod(Evaluator& ev, const Value& obj, const std::string& name, CallArgs& args) {
  if (obj.is_string() && IsStrMethod(name)) return StrMethod(ev, obj.as_string(), name, args);
  if (obj.is_dict() && DictMethods().count(name)) return DictMethod(ev, obj, name, args);
  if (obj.is_list() && ListMethods().count(name) && !(name == "copy" && obj.as_list().is_tuple)) {
    return ListMethod(ev, obj, name, args);
  }
  return ev.Call(GetAttr(ev, obj, name), args);
}

}  // namespace niels::daemon::text::jinja
