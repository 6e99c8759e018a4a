// The globals of transformers' chat-template environment: range (Jinja2's sandboxed range, at
// most 100000 items), dict, namespace, raise_exception(message) and strftime_now(format), which
// formats the render's fixed "now" (UTC) as Python's naive datetime.strftime does.
#include <locale.h>

#include <ctime>

#include "daemon/text/jinja/arg_reader.h"
#include "daemon/text/jinja/builtins.h"
#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/evaluator.h"

namespace niels::daemon::text::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

int64_t RangeArg(const Value& v) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  ThrowRender("'" + v.TypeName() + "' object cannot be interpreted as an integer");
}

Value Range(Evaluator& ev, CallArgs& args) {
  if (!args.keyword.empty()) ThrowRender("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) ThrowRender("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  const int64_t start = p.size() == 1 ? 0 : RangeArg(p[0]);
  const int64_t stop = RangeArg(p.size() == 1 ? p[0] : p[1]);
  const int64_t step = p.size() == 3 ? RangeArg(p[2]) : 1;
  if (step == 0) ThrowRender("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  if (count > kMaxRange) {
    ThrowRender("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  ev.CheckList(static_cast<size_t>(count));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (__int128 i = 0; i < count; ++i) items.emplace_back(static_cast<int64_t>(start + i * step));
  return Value::MakeList(std::move(items));
}

// dict(mapping or pairs, **kwargs) as Python builds it.
Value MakeDict(Evaluator& ev, CallArgs& args, const char* name) {
  if (args.positional.size() > 1) ThrowRender(std::string(name) + " expected at most 1 argument");
  Value d = Value::MakeDict();
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().items()) d.mutable_dict().Set(k, v);
    } else {
      for (const Value& pair : ev.Iterate(src)) {
        const std::vector<Value> kv = ev.Iterate(pair);
        if (kv.size() != 2)
          ThrowRender("dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
        if (!Dict::IsHashableKey(kv[0])) ThrowRender("unhashable type: '" + kv[0].TypeName() + "'");
        d.mutable_dict().Set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d.mutable_dict().Set(Value(k), v);
  return d;
}

Value Namespace(Evaluator& ev, CallArgs& args) {
  const Value d = MakeDict(ev, args, "namespace");
  auto ns = std::make_shared<Object>();
  ns->type_name = "Namespace";
  ns->writable = true;
  for (const auto& [k, v] : d.as_dict().items()) {
    CheckNamespaceValue(v);
    ns->attributes.Set(k, v);
  }
  return Value(std::move(ns));
}

Value RaiseException(Evaluator& ev, CallArgs& args) {
  ArgReader r("raise_exception", args, {"message"});
  ThrowRender(ev.Str(r.Required(0)));
}

// Python's datetime.strftime for a naive datetime: %f is the microseconds, %z and %Z are empty,
// the rest is C's strftime in the C locale.
Value StrftimeNow(Evaluator& ev, CallArgs& args) {
  ArgReader r("strftime_now", args, {"format"});
  const std::string& format = r.String(0);
  ev.CheckString(format.size() * 32);
  const auto now = ev.now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::string c_format;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[++i];
      if (c == 'f') {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%06lld", static_cast<long long>(micros < 0 ? micros + 1000000 : micros));
        c_format += buf;
      } else if (c != 'z' && c != 'Z') {
        c_format += '%';
        c_format += c;
      }
    } else {
      c_format += format[i];
    }
  }
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  tm.tm_isdst = -1;
  locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
  std::string out(c_format.size() * 32 + 64, '\0');  // %c, the longest, writes 24 bytes
  const size_t n = strftime_l(out.data(), out.size(), c_format.c_str(), &tm, c_locale);
  freelocale(c_locale);
  out.resize(n);
  return Value(std::move(out));
}

void AddFunction(Frame& frame, const char* name, std::function<Value(Evaluator&, CallArgs&)> fn) {
  auto callable = std::make_shared<Callable>();
  callable->name = name;
  callable->fn = std::move(fn);
  frame.Set(name, Value(std::move(callable)));
}

}  // namespace

void AddGlobals(Frame& frame) {
  AddFunction(frame, "range", Range);
  AddFunction(frame, "dict", [](Evaluator& ev, CallArgs& args) { return MakeDict(ev, args, "dict"); });
  AddFunction(frame, "namespace", Namespace);
  AddFunction(frame, "raise_exception", RaiseException);
  AddFunction(frame, "strftime_now", StrftimeNow);
}

}  // namespace niels::daemon::text::jinja
