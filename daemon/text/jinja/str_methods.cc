// The methods of Python's str that templates call: strip lstrip rstrip split rsplit splitlines
// startswith endswith replace upper lower title capitalize find rfind index rindex count join
// format (no format specs) isalpha isdigit isnumeric isdecimal isalnum isspace islower isupper
// removeprefix removesuffix center ljust rjust partition rpartition zfill. Indices count code
// points.
#include "daemon/text/jinja/str_methods.h"

#include <algorithm>
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

const std::unordered_set<std::string_view>& StrMethods() {
  static const auto* names = new std::unordered_set<std::string_view>{
      "strip",        "lstrip",       "rstrip",    "split",   "rsplit",  "splitlines", "startswith",
      "endswith",     "replace",      "upper",     "lower",   "title",   "capitalize", "find",
      "rfind",        "index",        "rindex",    "count",   "join",    "format",     "isalpha",
      "isdigit",      "isnumeric",    "isdecimal", "isalnum", "isspace", "islower",    "isupper",
      "removeprefix", "removesuffix", "center",    "ljust",   "rjust",   "partition",  "rpartition", "zfill"};
  return *names;
}
size_t CodePointIndex(const std::string& s, size_t byte_pos) {
  return CodePointCount(std::string_view(s).substr(0, byte_pos));
}

const std::string& StrArg(const Value& v, const char* what) {
  if (!v.is_string()) ThrowRender(std::string(what) + " must be str, not " + v.TypeName());
  return v.as_string();
}

Value StrList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::MakeList(std::move(items));
}

// str.split / str.rsplit.
Value Split(Evaluator& ev, const std::string& s, CallArgs& args, bool from_right) {
  ArgReader r(from_right ? "rsplit" : "split", args, {"sep", "maxsplit"});
  int64_t maxsplit = r.Int(1, -1);
  std::vector<std::string> parts;
  const Value sep = r.Or(0, Value::MakeNone());
  if (sep.is_none()) {
    // Runs of whitespace; leading and trailing whitespace give no empty parts.
    std::u32string text = DecodeUtf8(s);
    if (from_right) std::reverse(text.begin(), text.end());
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && IsPySpace(text[i])) ++i;
      if (i == text.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        // The rest, trailing whitespace included.
        parts.push_back(EncodeUtf8(std::u32string_view(text).substr(i)));
        break;
      }
      size_t j = i;
      while (j < text.size() && !IsPySpace(text[j])) ++j;
      parts.push_back(EncodeUtf8(std::u32string_view(text).substr(i, j - i)));
      i = j;
    }
    if (from_right) {
      for (auto& p : parts) {
        std::u32string cps = DecodeUtf8(p);
        std::reverse(cps.begin(), cps.end());
        p = EncodeUtf8(cps);
      }
      std::reverse(parts.begin(), parts.end());
    }
  } else {
    const std::string& delim = StrArg(sep, "sep");
    if (delim.empty()) ThrowRender("empty separator");
    if (!from_right) {
      size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t hit = s.find(delim, start);
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(start, hit - start));
        start = hit + delim.size();
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < delim.size()) break;
        const size_t hit = s.rfind(delim, end - delim.size());
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(hit + delim.size(), end - hit - delim.size()));
        end = hit;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
  }
  ev.CheckList(parts.size());
  return StrList(std::move(parts));
}

Value SplitLines(const std::string& s, CallArgs& args) {
  ArgReader r("splitlines", args, {"keepends"});
  const bool keepends = r.Or(0, Value(false)).Truthy();
  std::vector<std::string> parts;
  const std::u32string text = DecodeUtf8(s);
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                          c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) continue;
    size_t end = i + 1;
    if (c == '\r' && end < text.size() && text[end] == '\n') ++end;
    parts.push_back(EncodeUtf8(std::u32string_view(text).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < text.size()) parts.push_back(EncodeUtf8(std::u32string_view(text).substr(start)));
  return StrList(std::move(parts));
}

// startswith / endswith: a str or a tuple of str.
bool AffixTest(const std::string& s, const Value& affix, bool prefix) {
  auto test = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_string()) return test(affix.as_string());
  if (affix.is_list() && affix.as_list().is_tuple) {
    for (const Value& a : affix.as_list().items) {
      if (test(StrArg(a, "tuple item"))) return true;
    }
    return false;
  }
  ThrowRender(std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " +
              affix.TypeName());
}

Value Replace(Evaluator& ev, const std::string& s, CallArgs& args) {
  ArgReader r("replace", args, {"old", "new", "count"});
  const std::string& from = r.String(0);
  const std::string& to = r.String(1);
  int64_t count = r.Int(2, -1);
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every character and at the end.
    const std::u32string text = DecodeUtf8(s);
    for (size_t i = 0; i <= text.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      if (i < text.size()) AppendUtf8(out, text[i]);
      ev.CheckString(out.size());
    }
    return Value(std::move(out));
  }
  size_t start = 0;
  while (count != 0) {
    const size_t hit = s.find(from, start);
    if (hit == std::string::npos) break;
    out.append(s, start, hit - start);
    out += to;
    ev.CheckString(out.size());
    start = hit + from.size();
    if (count > 0) --count;
  }
  out.append(s, start, std::string::npos);
  ev.CheckString(out.size());
  return Value(std::move(out));
}

Value Join(Evaluator& ev, const std::string& sep, CallArgs& args) {
  ArgReader r("join", args, {"iterable"});
  std::string out;
  const std::vector<Value> items = ev.Iterate(r.Required(0));
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      ThrowRender("sequence item " + std::to_string(i) + ": expected str instance, " + items[i].TypeName() + " found");
    }
    if (i > 0) out += sep;
    out += items[i].as_string();
    ev.CheckString(out.size());
  }
  return Value(std::move(out));
}

// str.format: {} {0} {name} with .attr and [key] lookups and !s/!r conversions; no format specs.
Value Format(Evaluator& ev, const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      ThrowRender("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) ThrowRender("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) ThrowRender("format specs and conversions other than !s and !r are not supported");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos) ThrowRender("format specs in str.format are not supported");
    size_t name_end = std::min(field.find('.'), field.find('['));
    const std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      if (head.size() > 9) ThrowRender("Replacement index " + head + " out of range");
      const size_t index = head.empty() ? auto_index++ : std::strtoul(head.c_str(), nullptr, 10);
      if (index >= args.positional.size()) ThrowRender("Replacement index " + std::to_string(index) + " out of range");
      v = args.positional[index];
    } else {
      auto it =
          std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kv) { return kv.first == head; });
      if (it == args.keyword.end()) ThrowRender("KeyError: '" + head + "'");
      v = it->second;
    }
    for (size_t p = name_end; p < field.size();) {
      if (field[p] == '.') {
        const size_t end = std::min(field.find('.', p + 1), field.find('[', p + 1));
        v = GetAttr(ev, v, field.substr(p + 1, end - p - 1));
        p = end;
      } else {
        const size_t end = field.find(']', p);
        if (end == std::string::npos) ThrowRender("Missing ']' in format string");
        const std::string key = field.substr(p + 1, end - p - 1);
        const bool numeric =
            !key.empty() && std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; });
        if (numeric && key.size() > 18) ThrowRender("index " + key + " out of range");
        v = GetItem(ev, v, numeric ? Value(static_cast<int64_t>(std::strtoll(key.c_str(), nullptr, 10))) : Value(key));
        p = end + 1;
      }
    }
    if (conversion != 's' && conversion != 'r')
      ThrowRender("Unknown conversion specifier " + std::string(1, conversion));
    out += conversion == 'r' ? PyRepr(v, ev.limits().max_output_bytes) : ev.Str(v);
    ev.CheckString(out.size());
  }
  return Value(std::move(out));
}

Value Pad(Evaluator& ev, const std::string& s, CallArgs& args, const char* name) {
  ArgReader r(name, args, {"width", "fillchar"});
  const int64_t width = r.Int(0, 0);
  const std::string fill = r.Has(1) ? r.String(1) : std::string(" ");
  if (CodePointCount(fill) != 1) ThrowRender("The fill character must be exactly one character long");
  const auto len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return Value(s);
  ev.CheckString(static_cast<size_t>(width) * fill.size());
  const int64_t total = width - len;
  int64_t left = 0;
  if (std::string_view(name) == "rjust") left = total;
  if (std::string_view(name) == "center") left = total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < total; ++i) out += fill;
  return Value(std::move(out));
}

Value Partition(const std::string& s, CallArgs& args, bool from_right) {
  ArgReader r(from_right ? "rpartition" : "partition", args, {"sep"});
  const std::string& sep = r.String(0);
  if (sep.empty()) ThrowRender("empty separator");
  const size_t hit = from_right ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos) {
    return from_right ? Value::MakeList({Value(""), Value(""), Value(s)}, true)
                      : Value::MakeList({Value(s), Value(""), Value("")}, true);
  }
  return Value::MakeList({Value(s.substr(0, hit)), Value(sep), Value(s.substr(hit + sep.size()))}, true);
}

Value Strip(const std::string& s, CallArgs& args, const char* name, bool left, bool right) {
  ArgReader r(name, args, {"chars"});
  const Value chars = r.Or(0, Value::MakeNone());
  if (chars.is_none()) return Value(std::string(StripPySpace(s, left, right)));
  if (!chars.is_string()) ThrowRender(std::string(name) + " arg must be None or str");
  return Value(StripChars(s, chars.as_string(), left, right));
}

Value Find(const std::string& s, CallArgs& args, const std::string& name) {
  const bool reverse = name[0] == 'r';
  ArgReader r(name, args, {"sub"});
  const std::string& sub = r.String(0);
  const size_t hit = reverse ? s.rfind(sub) : s.find(sub);
  if (hit == std::string::npos) {
    if (name == "index" || name == "rindex") ThrowRender("substring not found");
    return Value(int64_t{-1});
  }
  return Value(static_cast<int64_t>(CodePointIndex(s, hit)));
}

Value Count(const std::string& s, CallArgs& args) {
  ArgReader r("count", args, {"sub"});
  const std::string& sub = r.String(0);
  if (sub.empty()) return Value(static_cast<int64_t>(CodePointCount(s) + 1));
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return Value(n);
}

// str.zfill(width): zeros after a leading sign up to `width` code points.
Value ZFill(Evaluator& ev, const std::string& s, CallArgs& args) {
  ArgReader r("zfill", args, {"width"});
  const int64_t width = r.Int(0, 0);
  const auto len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return Value(s);
  ev.CheckString(static_cast<size_t>(width));
  const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  std::string out = s.substr(0, sign);
  out.append(static_cast<size_t>(width - len), '0').append(s, sign, std::string::npos);
  return Value(std::move(out));
}

Value NoArgs(CallArgs& args, const char* name, Value result) {
  ArgReader r(name, args, {});
  return result;
}

}  // namespace

bool IsStrMethod(std::string_view name) { return StrMethods().count(name) != 0; }

Value StrMethod(Evaluator& ev, const std::string& s, const std::string& name, CallArgs& args) {
  ev.Charge(static_cast<int64_t>(s.size()));
  if (name == "strip") return Strip(s, args, "strip", true, true);
  if (name == "lstrip") return Strip(s, args, "lstrip", true, false);
  if (name == "rstrip") return Strip(s, args, "rstrip", false, true);
  if (name == "split") return Split(ev, s, args, false);
  if (name == "rsplit") return Split(ev, s, args, true);
  if (name == "splitlines") return SplitLines(s, args);
  if (name == "startswith" || name == "endswith") {
    ArgReader r(name, args, {"prefix"});
    return Value(AffixTest(s, r.Required(0), name == "startswith"));
  }
  if (name == "replace") return Replace(ev, s, args);
  if (name == "upper") return NoArgs(args, "upper", Value(PyUpper(s)));
  if (name == "lower") return NoArgs(args, "lower", Value(PyLower(s)));
  if (name == "title") return NoArgs(args, "title", Value(PyTitle(s)));
  if (name == "capitalize") return NoArgs(args, "capitalize", Value(PyCapitalize(s)));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") return Find(s, args, name);
  if (name == "count") return Count(s, args);
  if (name == "join") return Join(ev, s, args);
  if (name == "format") return Format(ev, s, args);
  if (name == "isalpha") return NoArgs(args, "isalpha", Value(PyIsAlpha(s)));
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return NoArgs(args, "isdigit", Value(PyIsDigit(s)));
  if (name == "isalnum") return NoArgs(args, "isalnum", Value(PyIsAlnum(s)));
  if (name == "isspace") return NoArgs(args, "isspace", Value(PyIsSpace(s)));
  if (name == "islower") return NoArgs(args, "islower", Value(PyIsLower(s)));
  if (name == "isupper") return NoArgs(args, "isupper", Value(PyIsUpper(s)));
  if (name == "removeprefix" || name == "removesuffix") {
    ArgReader r(name, args, {"affix"});
    const std::string& a = r.String(0);
    if (name == "removeprefix") return Value(s.compare(0, a.size(), a) == 0 ? s.substr(a.size()) : s);
    if (a.size() <= s.size() && s.compare(s.size() - a.size(), a.size(), a) == 0)
      return Value(s.substr(0, s.size() - a.size()));
    return Value(s);
  }
  if (name == "center" || name == "ljust" || name == "rjust") return Pad(ev, s, args, name.c_str());
  if (name == "partition" || name == "rpartition") return Partition(s, args, name == "rpartition");
  if (name == "zfill") return ZFill(ev, s, args);
  ThrowRender("'str' object has no attribute '" + name + "'");
}

}  // namespace niels::daemon::text::jinja
