// Python's printf-style string formatting, `format % args` (str_methods.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "daemon/text/jinja/builtins.h"
#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/evaluator.h"
#include "daemon/text/jinja/py_format.h"
#include "daemon/text/jinja/py_text.h"
#include "daemon/text/jinja/str_methods.h"

namespace niels::daemon::text::jinja {
namespace {

struct Spec {
  std::string flags;  // any of "-+ 0#"
  int width = -1;
  int precision = -1;
  char conversion = 0;
};

// Pads `text` to the spec's width (code points), on the left unless the '-' flag is set.
std::string Pad(const Spec& spec, std::string text) {
  const auto len = static_cast<int>(CodePointCount(text));
  if (spec.width <= len) return text;
  const std::string fill(static_cast<size_t>(spec.width - len), ' ');
  return spec.flags.find('-') != std::string::npos ? text + fill : fill + text;
}

// snprintf with the spec's flags, width and precision for one number.
template <typename T>
std::string FormatNumber(Evaluator& ev, const Spec& spec, const char* length, char conversion, T value) {
  ev.CheckString(static_cast<size_t>(std::max(spec.width, 0)) + static_cast<size_t>(std::max(spec.precision, 0)));
  std::string f(1, '%');
  f.append(spec.flags);
  if (spec.width >= 0) f.append(std::to_string(spec.width));
  if (spec.precision >= 0) f.append(".").append(std::to_string(spec.precision));
  f += length;
  f += conversion;
  const int n = std::snprintf(nullptr, 0, f.c_str(), value);
  std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::snprintf(out.data(), out.size(), f.c_str(), value);
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

// %x %X %o as Python writes them: sign, then "0x"/"0X"/"0o" with '#', then zeros up to the width
// with '0', then the magnitude's digits; spaces pad the rest (on the right with '-').
std::string FormatRadix(Evaluator& ev, const Spec& spec, int64_t n) {
  const char c = spec.conversion;
  const auto magnitude = static_cast<unsigned long long>(n < 0 ? -static_cast<__int128>(n) : n);
  char buf[32];
  std::snprintf(buf, sizeof buf, c == 'o' ? "%llo" : c == 'x' ? "%llx" : "%llX", magnitude);
  std::string digits = buf;
  if (spec.precision > static_cast<int>(digits.size())) {
    digits.insert(0, static_cast<size_t>(spec.precision) - digits.size(), '0');
  }
  auto has = [&](char flag) { return spec.flags.find(flag) != std::string::npos; };
  std::string head = n < 0 ? "-" : has('+') ? "+" : has(' ') ? " " : "";
  if (has('#')) head.append(c == 'o' ? "0o" : c == 'x' ? "0x" : "0X");
  const int used = static_cast<int>(head.size() + digits.size());
  ev.CheckString(static_cast<size_t>(std::max(spec.width, used)));
  if (spec.width > used && has('0') && !has('-')) digits.insert(0, static_cast<size_t>(spec.width - used), '0');
  return Pad(spec, head.append(digits));
}

int64_t IntegerOf(const Value& v, char conversion) {
  if (v.is_undefined()) ThrowRender(v.undefined_hint());
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  const bool any_real = conversion == 'd' || conversion == 'i' || conversion == 'u';
  if (v.is_float() && any_real) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) ThrowRender("cannot convert float to integer");
    return static_cast<int64_t>(d);
  }
  std::string message(1, '%');
  message.push_back(conversion);
  message.append(" format: ").append(any_real ? "a real number" : "an integer").append(" is required, not ");
  ThrowRender(message.append(v.TypeName()));
}

std::string Convert(Evaluator& ev, const Spec& spec, const Value& v) {
  const char c = spec.conversion;
  switch (c) {
    case 's':
    case 'r':
    case 'a': {
      std::string text = c == 's' ? ev.Str(v) : PyRepr(v, ev.limits().max_output_bytes);
      if (spec.precision >= 0) {
        const std::u32string cps = DecodeUtf8(text);
        text = EncodeUtf8(std::u32string_view(cps).substr(0, static_cast<size_t>(spec.precision)));
      }
      return Pad(spec, std::move(text));
    }
    case 'c': {
      if (v.is_string() && CodePointCount(v.as_string()) == 1) return Pad(spec, v.as_string());
      const int64_t cp = IntegerOf(v, 'c');
      if (cp < 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) ThrowRender("%c arg not in range(0x110000)");
      std::string out;
      AppendUtf8(out, static_cast<char32_t>(cp));
      return Pad(spec, std::move(out));
    }
    case 'd':
    case 'i':
    case 'u':
      return FormatNumber(ev, spec, "ll", 'd', static_cast<long long>(IntegerOf(v, c)));
    case 'x':
    case 'X':
    case 'o':
      return FormatRadix(ev, spec, IntegerOf(v, c));
    default: {  // e E f F g G
      if (v.is_undefined()) ThrowRender(v.undefined_hint());
      if (!v.is_number()) ThrowRender(std::string("must be real number, not ").append(v.TypeName()));
      return FormatNumber(ev, spec, "", c, v.ToDouble());
    }
  }
}

}  // namespace

Value PercentFormat(Evaluator& ev, const std::string& format, const Value& args) {
  const bool tuple = args.is_list() && args.as_list().is_tuple;
  // Python takes anything subscriptable but a tuple or str as a mapping: with one, unused
  // arguments are no error.
  const bool mapping_like = args.is_dict() || (args.is_list() && !tuple) || args.is_undefined();
  std::vector<Value> positional = tuple ? args.as_list().items : std::vector<Value>{args};
  size_t next = 0;
  bool used_key = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    ++i;
    if (i >= format.size()) ThrowRender("incomplete format");
    Value value;
    bool have_value = false;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) ThrowRender("incomplete format key");
      if (!args.is_dict() && !args.is_undefined()) ThrowRender("format requires a mapping");
      value = GetItem(ev, args, Value(format.substr(i + 1, close - i - 1)));
      if (args.is_dict() && value.is_undefined()) ThrowRender("KeyError: '" + format.substr(i + 1, close - i - 1) + "'");
      have_value = used_key = true;
      i = close + 1;
    }
    Spec spec;
    while (i < format.size() && std::string("-+ 0#").find(format[i]) != std::string::npos) spec.flags += format[i++];
    auto number = [&]() {
      int n = 0;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
        n = n * 10 + (format[i++] - '0');
        if (n > 1000000) ThrowRender("width or precision too big");
      }
      return n;
    };
    if (i < format.size() && format[i] >= '0' && format[i] <= '9') spec.width = number();
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = number();
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) ThrowRender("incomplete format");
    spec.conversion = format[i];
    if (spec.conversion == '%') {
      out.push_back('%');
      continue;
    }
    if (std::string("sradiuxXoeEfFgGc").find(spec.conversion) == std::string::npos) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "unsupported format character '%c' (0x%x) at index %zu", spec.conversion,
                    static_cast<unsigned char>(spec.conversion), i);
      ThrowRender(buf);
    }
    if (!have_value) {
      if (next >= positional.size()) ThrowRender("not enough arguments for format string");
      value = positional[next++];
    }
    out += Convert(ev, spec, value);
    ev.CheckString(out.size());
  }
  if (next < positional.size() && !used_key && !mapping_like) {
    ThrowRender("not all arguments converted during string formatting");
  }
  return Value(std::move(out));
}

}  // namespace niels::daemon::text::jinja
