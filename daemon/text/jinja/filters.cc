// Filters, as Jinja2 3.1's builtins (jinja2/filters.py) and transformers' tojson behave:
// abs attr batch capitalize center count d default dictsort e escape first float forceescape
// indent int items join last length list lower map max min reject rejectattr replace reverse
// round safe select selectattr sort string sum title tojson trim unique upper wordcount.
// map/select/reject return lists where Jinja2 returns generators (the same once joined, listed or
// iterated). Not implemented: filesizeformat format groupby pprint random slice striptags
// truncate urlencode urlize wordwrap xmlattr.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "daemon/text/jinja/arg_reader.h"
#include "daemon/text/jinja/builtins.h"
#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/evaluator.h"
#include "daemon/text/jinja/py_format.h"
#include "daemon/text/jinja/py_text.h"

namespace niels::daemon::text::jinja {
namespace {

std::vector<Value> ToList(Evaluator& ev, const Value& v) { return ev.Iterate(v); }

// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value GetPath(Evaluator& ev, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return GetItem(ev, item, attribute);
  Value v = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = GetItem(ev, v, numeric ? Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// A sort or comparison key: the attribute if given, strings lowercased unless case_sensitive.
Value SortKey(Evaluator& ev, const Value& item, const Value* attribute, bool case_sensitive) {
  Value v = attribute ? GetPath(ev, item, *attribute) : item;
  if (!case_sensitive && v.is_string()) return Value(PyLower(v.as_string()));
  return v;
}

Value Length(Evaluator& ev, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value(int64_t{0});
    case Value::Kind::kString:
      return Value(static_cast<int64_t>(CodePointCount(v.as_string())));
    case Value::Kind::kList:
      return Value(static_cast<int64_t>(v.as_list().items.size()));
    case Value::Kind::kDict:
      return Value(static_cast<int64_t>(v.as_dict().size()));
    default:
      ThrowRender("object of type '" + v.TypeName() + "' has no len()");
  }
}

Value Default(const Value& input, CallArgs& args) {
  ArgReader r("default", args, {"default_value", "boolean"});
  const bool boolean = r.Or(1, Value(false)).Truthy();
  if (input.is_undefined() || (boolean && !input.Truthy())) return r.Or(0, Value(""));
  return input;
}

Value ToInt(const Value& input, CallArgs& args) {
  ArgReader r("int", args, {"default", "base"});
  const Value fallback = r.Or(0, Value(int64_t{0}));
  const int64_t base = r.Int(1, 10);
  if (input.is_undefined()) ThrowRender(input.undefined_hint());  // int(Undefined) raises
  if (input.is_int()) return input;
  if (input.is_bool()) return Value(int64_t{input.as_bool()});
  if (input.is_float()) {
    const double d = input.as_float();
    if (std::isnan(d)) return fallback;  // int(nan) raises ValueError: Jinja2 returns the default
    if (std::isinf(d)) ThrowRender("cannot convert float infinity to integer");  // OverflowError
    if (std::fabs(d) >= 9.2e18) ThrowRender("integer overflow (nielsd's template integers are 64-bit)");
    return Value(static_cast<int64_t>(d));
  }
  if (!input.is_string()) return fallback;
  std::string s(StripPySpace(input.as_string(), true, true));
  std::string digits;
  for (char c : s) {
    if (c != '_') digits.push_back(c);
  }
  if (!digits.empty() && base >= 2 && base <= 36) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
    if (errno == 0 && end != digits.c_str() && *end == '\0' && digits.find_first_of(" \t") == std::string::npos) {
      return Value(static_cast<int64_t>(v));
    }
  }
  // Jinja2 then tries int(float(value)).
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end != nullptr && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18 &&
      s.find_first_of("xXpP") == std::string::npos) {
    return Value(static_cast<int64_t>(d));
  }
  return fallback;
}

Value ToFloat(const Value& input, CallArgs& args) {
  ArgReader r("float", args, {"default"});
  const Value fallback = r.Or(0, Value(0.0));
  if (input.is_undefined()) ThrowRender(input.undefined_hint());  // float(Undefined) raises
  if (input.is_number()) return Value(input.ToDouble());
  if (!input.is_string()) return fallback;
  std::string s(StripPySpace(input.as_string(), true, true));
  std::string lowered = PyLower(s);
  if (lowered == "inf" || lowered == "+inf" || lowered == "infinity" || lowered == "+infinity") return Value(HUGE_VAL);
  if (lowered == "-inf" || lowered == "-infinity") return Value(-HUGE_VAL);
  if (lowered == "nan" || lowered == "+nan" || lowered == "-nan") return Value(std::nan(""));
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return fallback;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end == nullptr || *end != '\0') return fallback;
  return Value(d);
}

Value Indent(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("indent", args, {"width", "first", "blank"});
  std::string indention;
  const Value width = r.Or(0, Value(int64_t{4}));
  if (width.is_string()) {
    indention = width.as_string();
  } else {
    const int64_t n = r.Int(0, 4);
    ev.CheckString(static_cast<size_t>(std::max<int64_t>(n, 0)));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  const bool first = r.Or(1, Value(false)).Truthy();
  const bool blank = r.Or(2, Value(false)).Truthy();
  // Jinja2 appends "\n" to its input and splits it into lines: only a str survives that.
  if (input.is_undefined()) ThrowRender(input.undefined_hint());
  if (!input.is_string()) ThrowRender("the indent filter needs a str, not " + input.TypeName());
  CallArgs none;
  const Value lines_value = CallMethod(ev, Value(input.as_string() + "\n"), "splitlines", none);
  const auto& lines = lines_value.as_list().items;
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as_string();
    if (i > 0) {
      out += "\n";
      if (blank || !line.empty()) out += indention;
    }
    out += line;
    ev.CheckString(out.size());
  }
  if (first) out = indention + out;
  return Value(std::move(out));
}

Value Join(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("join", args, {"d", "attribute"});
  const std::string sep = r.Has(0) ? ev.Str(*r.Get(0)) : std::string();
  std::string out;
  bool first = true;
  for (const Value& item : ToList(ev, input)) {
    if (!first) out += sep;
    first = false;
    out += ev.Str(r.Has(1) ? GetPath(ev, item, *r.Get(1)) : item);
    ev.CheckString(out.size());
  }
  return Value(std::move(out));
}

Value Title(const Value& input, Evaluator& ev) {
  // Jinja2 splits before runs of "-", whitespace, "(", "{", "[", "<" and capitalizes each piece.
  const std::u32string text = DecodeUtf8(ev.Str(input));
  auto is_boundary = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
  };
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i + 1;
    const bool boundary = is_boundary(text[i]);
    while (j < text.size() && is_boundary(text[j]) == boundary) ++j;
    out += PyUpper(EncodeUtf8(std::u32string(1, text[i])));
    out += PyLower(EncodeUtf8(std::u32string_view(text).substr(i + 1, j - i - 1)));
    i = j;
  }
  return Value(std::move(out));
}

Value Escape(Evaluator& ev, const Value& input) {
  std::string out;
  for (char c : ev.Str(input)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  ev.CheckString(out.size());
  return Value(std::move(out));
}

Value ToJsonFilter(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = r.Or(0, Value(false)).Truthy();
  const Value indent = r.Or(1, Value::MakeNone());
  if (indent.is_string()) {
    o.indent = indent.as_string();
  } else if (!indent.is_none()) {
    const int64_t n = r.Int(1, 0);
    ev.CheckString(static_cast<size_t>(std::max<int64_t>(n, 0)));
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  if (o.indent) o.item_separator = ",";
  const Value separators = r.Or(2, Value::MakeNone());
  if (!separators.is_none()) {
    const std::vector<Value> parts = ev.Iterate(separators);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) {
      ThrowRender("separators must be a pair of strings");
    }
    o.item_separator = parts[0].as_string();
    o.key_separator = parts[1].as_string();
  }
  o.sort_keys = r.Or(3, Value(false)).Truthy();
  std::string json = ToJson(input, o, ev.limits().max_output_bytes);
  ev.CheckString(json.size());
  return Value(std::move(json));
}

// select / reject / selectattr / rejectattr.
Value SelectOrReject(Evaluator& ev, const Value& input, CallArgs& args, bool select, bool by_attribute) {
  if (!input.Truthy()) return Value::MakeList({});  // Jinja2 iterates only a truthy input
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) ThrowRender("selectattr/rejectattr need an attribute");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) test = ev.Str(args.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  test_args.keyword = args.keyword;
  if (!test.empty() && !IsKnownTest(test)) ThrowRender("No test named '" + test + "'.");
  std::vector<Value> out;
  for (const Value& item : ToList(ev, input)) {
    const Value v = by_attribute ? GetPath(ev, item, attribute) : item;
    CallArgs a = test_args;
    const bool passed = test.empty() ? v.Truthy() : ApplyTest(ev, test, v, a);
    if (passed == select) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

Value Map(Evaluator& ev, const Value& input, CallArgs& args) {
  if (!input.Truthy()) return Value::MakeList({});  // Jinja2 iterates only a truthy input
  std::vector<Value> out;
  const std::vector<Value> items = ToList(ev, input);
  if (args.positional.empty()) {
    ArgReader r("map", args, {"attribute", "default"});
    const Value& attribute = r.Required(0);
    for (const Value& item : items) {
      Value v = GetPath(ev, item, attribute);
      if (v.is_undefined() && r.Has(1)) v = *r.Get(1);
      out.push_back(std::move(v));
    }
    return Value::MakeList(std::move(out));
  }
  const std::string filter = ev.Str(args.positional[0]);
  if (!IsKnownFilter(filter)) ThrowRender("No filter named '" + filter + "'.");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    CallArgs a = rest;
    out.push_back(ApplyFilter(ev, filter, item, a));
  }
  return Value::MakeList(std::move(out));
}

Value Sort(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = r.Or(0, Value(false)).Truthy();
  const bool case_sensitive = r.Or(1, Value(false)).Truthy();
  std::vector<Value> items = ToList(ev, input);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(SortKey(ev, items[i], r.Get(2), case_sensitive), i);
  // Jinja2's sort keys are one-item lists, and Python compares lists item by item with == first:
  // equal keys (Undefined == Undefined included) are never compared with <.
  auto less = [&](const Value& a, const Value& b) { return !ev.Equal(a, b) && ev.Less(a, b); };
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  std::vector<Value> out;
  for (const auto& k : keyed) out.push_back(items[k.second]);
  return Value::MakeList(std::move(out));
}

Value DictSort(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!input.is_dict()) ThrowRender("You can only sort by either \"key\" or \"value\"");
  const bool case_sensitive = r.Or(0, Value(false)).Truthy();
  const std::string by = r.Has(1) ? ev.Str(*r.Get(1)) : "key";
  if (by != "key" && by != "value") ThrowRender("You can only sort by either \"key\" or \"value\"");
  const bool reverse = r.Or(2, Value(false)).Truthy();
  std::vector<Value> pairs;
  for (const auto& [k, v] : input.as_dict().items()) pairs.push_back(Value::MakeList({k, v}, true));
  auto key = [&](const Value& pair) {
    const Value& v = pair.as_list().items[by == "key" ? 0 : 1];
    return !case_sensitive && v.is_string() ? Value(PyLower(v.as_string())) : v;
  };
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    return reverse ? ev.Less(key(b), key(a)) : ev.Less(key(a), key(b));
  });
  return Value::MakeList(std::move(pairs));
}

Value Unique(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = r.Or(0, Value(false)).Truthy();
  std::vector<Value> seen, out;
  for (const Value& item : ToList(ev, input)) {
    Value key = SortKey(ev, item, r.Get(1), case_sensitive);
    if (!Dict::IsHashableKey(key)) ThrowRender("unhashable type: '" + key.TypeName() + "'");
    bool found = false;
    for (const Value& s : seen) found = found || ev.Equal(s, key);
    if (found) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

Value MinMax(Evaluator& ev, const Value& input, CallArgs& args, bool want_max) {
  ArgReader r(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = r.Or(0, Value(false)).Truthy();
  const std::vector<Value> items = ToList(ev, input);
  if (items.empty()) return Value::MakeUndefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = SortKey(ev, items[0], r.Get(1), case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = SortKey(ev, items[i], r.Get(1), case_sensitive);
    if (want_max ? ev.Less(best_key, key) : ev.Less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value Sum(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("sum", args, {"attribute", "start"});
  Value total = r.Or(1, Value(int64_t{0}));
  for (const Value& item : ToList(ev, input))
    total = BinaryOp(ev, "+", total, r.Has(0) ? GetPath(ev, item, *r.Get(0)) : item);
  return total;
}

Value Batch(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("batch", args, {"linecount", "fill_with"});
  const int64_t count = r.Int(0, 0);
  if (count <= 0) ThrowRender("batch size must be positive");
  std::vector<Value> out, current;
  for (const Value& item : ToList(ev, input)) {
    current.push_back(item);
    if (static_cast<int64_t>(current.size()) == count) out.push_back(Value::MakeList(std::exchange(current, {})));
  }
  if (!current.empty()) {
    if (r.Has(1)) {
      ev.CheckList(static_cast<size_t>(count));
      while (static_cast<int64_t>(current.size()) < count) current.push_back(*r.Get(1));
    }
    out.push_back(Value::MakeList(std::move(current)));
  }
  return Value::MakeList(std::move(out));
}

Value Round(const Value& input, CallArgs& args) {
  ArgReader r("round", args, {"precision", "method"});
  const int64_t precision = r.Int(0, 0);
  const std::string method = r.Has(1) && r.Get(1)->is_string() ? r.Get(1)->as_string() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    ThrowRender("method must be common, ceil or floor");
  }
  if (!input.is_number()) ThrowRender("type " + input.TypeName() + " doesn't define __round__ method");
  if (method == "common" && (input.is_int() || input.is_bool())) {
    // Python's round(int, n) stays an int (n < 0 rounds to tens, hundreds... half to even).
    const int64_t v = input.is_bool() ? input.as_bool() : input.as_int();
    if (precision >= 0) return Value(v);
    if (precision < -18) return Value(int64_t{0});
    int64_t scale = 1;
    for (int64_t i = 0; i < -precision; ++i) scale *= 10;
    int64_t q = v / scale, rem = v % scale;
    if (rem < 0) {
      rem += scale;
      q -= 1;
    }
    if (rem * 2 > scale || (rem * 2 == scale && (q & 1))) q += 1;
    int64_t out;
    if (__builtin_mul_overflow(q, scale, &out)) ThrowRender("integer overflow");
    return Value(out);
  }
  const double x = input.ToDouble();
  if (!std::isfinite(x) || precision > 300 || precision < -300) return Value(x);
  if (method == "common") {
    // Python's round(x, n): correctly rounded, ties to even, via the decimal expansion.
    if (precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
      return Value(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(x / scale) * scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  // Python's math.ceil/floor return an int: -0.0 becomes 0.
  const double rounded = (method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) + 0.0;
  return Value(rounded / scale);
}

Value Reverse(Evaluator& ev, const Value& input) {
  if (input.is_string()) {
    std::u32string cps = DecodeUtf8(input.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(EncodeUtf8(cps));
  }
  std::vector<Value> items = ToList(ev, input);
  std::reverse(items.begin(), items.end());
  return Value::MakeList(std::move(items));
}

Value Items(const Value& input) {
  if (input.is_undefined()) return Value::MakeList({});
  if (!input.is_dict()) ThrowRender("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, v] : input.as_dict().items()) out.push_back(Value::MakeList({k, v}, true));
  return Value::MakeList(std::move(out));
}

Value Center(Evaluator& ev, const Value& input, CallArgs& args) {
  ArgReader r("center", args, {"width"});
  CallArgs a;
  a.positional.push_back(r.Or(0, Value(int64_t{80})));
  return CallMethod(ev, Value(ev.Str(input)), "center", a);
}

Value WordCount(Evaluator& ev, const Value& input) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(ev.Str(input))) {
    const bool word = c == '_' || PyIsAlnum(EncodeUtf8(std::u32string(1, c)));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Value Abs(const Value& input) {
  if (input.is_float()) return Value(std::fabs(input.as_float()));
  if (input.is_int() || input.is_bool()) {
    const int64_t v = input.is_bool() ? input.as_bool() : input.as_int();
    if (v == INT64_MIN) ThrowRender("integer overflow");
    return Value(v < 0 ? -v : v);
  }
  ThrowRender("bad operand type for abs(): '" + input.TypeName() + "'");
}

const std::unordered_set<std::string_view>& FilterNames() {
  static const auto* names = new std::unordered_set<std::string_view>{
      "abs",     "attr",    "batch", "capitalize", "center",      "count",      "d",    "default", "dictsort",
      "e",       "escape",  "first", "float",      "forceescape", "indent",     "int",  "items",   "join",
      "last",    "length",  "list",  "lower",      "map",         "max",        "min",  "reject",  "rejectattr",
      "replace", "reverse", "round", "safe",       "select",      "selectattr", "sort", "string",  "sum",
      "title",   "tojson",  "trim",  "unique",     "upper",       "wordcount"};
  return *names;
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return FilterNames().count(name) != 0; }

Value ApplyFilter(Evaluator& ev, std::string_view name, const Value& input, CallArgs& args) {
  ev.Charge(1);
  if (name == "default" || name == "d") return Default(input, args);
  if (name == "length" || name == "count") return ArgReader("length", args, {}), Length(ev, input);
  if (name == "string" || name == "safe") return ArgReader(name, args, {}), Value(ev.Str(input));
  if (name == "trim") {
    ArgReader r("trim", args, {"chars"});
    CallArgs a;
    if (r.Has(0)) a.positional.push_back(*r.Get(0));
    return CallMethod(ev, Value(ev.Str(input)), "strip", a);
  }
  if (name == "upper") return ArgReader(name, args, {}), Value(PyUpper(ev.Str(input)));
  if (name == "lower") return ArgReader(name, args, {}), Value(PyLower(ev.Str(input)));
  if (name == "capitalize") return ArgReader(name, args, {}), Value(PyCapitalize(ev.Str(input)));
  if (name == "title") return ArgReader(name, args, {}), Title(input, ev);
  if (name == "replace") {
    ArgReader r("replace", args, {"old", "new", "count"});
    CallArgs a;
    a.positional = {Value(ev.Str(r.Required(0))), Value(ev.Str(r.Required(1)))};
    if (r.Has(2) && !r.Get(2)->is_none()) a.positional.push_back(*r.Get(2));
    return CallMethod(ev, Value(ev.Str(input)), "replace", a);
  }
  if (name == "tojson") return ToJsonFilter(ev, input, args);
  if (name == "join") return Join(ev, input, args);
  if (name == "first" || name == "last") {
    ArgReader r(name, args, {});
    const std::vector<Value> items = ToList(ev, input);
    if (items.empty())
      return Value::MakeUndefined(std::string("No ") + std::string(name) + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return ArgReader(name, args, {}), Value::MakeList(ToList(ev, input));
  if (name == "items") return ArgReader(name, args, {}), Items(input);
  if (name == "int") return ToInt(input, args);
  if (name == "float") return ToFloat(input, args);
  if (name == "indent") return Indent(ev, input, args);
  if (name == "select" || name == "reject") return SelectOrReject(ev, input, args, name == "select", false);
  if (name == "selectattr" || name == "rejectattr") return SelectOrReject(ev, input, args, name == "selectattr", true);
  if (name == "map") return Map(ev, input, args);
  if (name == "unique") return Unique(ev, input, args);
  if (name == "sort") return Sort(ev, input, args);
  if (name == "dictsort") return DictSort(ev, input, args);
  if (name == "min" || name == "max") return MinMax(ev, input, args, name == "max");
  if (name == "sum") return Sum(ev, input, args);
  if (name == "batch") return Batch(ev, input, args);
  if (name == "round") return Round(input, args);
  if (name == "reverse") return ArgReader(name, args, {}), Reverse(ev, input);
  if (name == "abs") return ArgReader(name, args, {}), Abs(input);
  if (name == "e" || name == "escape" || name == "forceescape") return ArgReader(name, args, {}), Escape(ev, input);
  if (name == "center") return Center(ev, input, args);
  if (name == "wordcount") return ArgReader(name, args, {}), WordCount(ev, input);
  if (name == "attr") {
    ArgReader r("attr", args, {"name"});
    return GetAttrOnly(ev, input, r.String(0));
  }
  ThrowRender("No filter named '" + std::string(name) + "'.");
}

}  // namespace niels::daemon::text::jinja
