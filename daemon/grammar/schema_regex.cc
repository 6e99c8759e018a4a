#include "daemon/grammar/schema_regex.h"

#include <cctype>
#include <vector>

#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::grammar {
namespace {

using common::Status;

// Characters a JSON string may hold raw (the rest are escaped).
const CodePointSet& RawJsonChars() {
  static const CodePointSet* raw =
      new CodePointSet(CodePointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}}).Complement());
  return *raw;
}

std::string EscapeFragment(uint32_t cp) {
  // The GBNF literal of the JSON escape of cp: a backslash (written \\ in GBNF) and the rest.
  switch (cp) {
    case '"': return R"("\\\"")";
    case '\\': return R"("\\\\")";
    case '\n': return R"("\\n")";
    case '\r': return R"("\\r")";
    case '\t': return R"("\\t")";
    case 0x08: return R"("\\b")";
    case 0x0C: return R"("\\f")";
    default: return fmt::format(R"("\\u00{:02x}")", cp);
  }
}

CodePointSet Digits() { return CodePointSet({{'0', '9'}}); }
CodePointSet WordChars() { return CodePointSet({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}); }
CodePointSet Spaces() { return CodePointSet({{' ', ' '}, {'\t', '\r'}}); }
CodePointSet PrintableAscii() { return CodePointSet({{0x20, 0x7E}}); }

class PatternParser {
 public:
  PatternParser(std::string_view p, uint32_t max_repetition, size_t max_bytes)
      : p_(p), max_rep_(max_repetition), max_bytes_(max_bytes) {}

  common::StatusOr<std::string> Parse() {
    bool anchored_start = false, anchored_end = false;
    std::string_view body = p_;
    if (!body.empty() && body.front() == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    if (body.size() > pos_ && body.back() == '$' && !EscapedAt(body.size() - 1)) {
      anchored_end = true;
      end_ = body.size() - 1;
    } else {
      end_ = body.size();
    }
    std::string expr = Alternation(0);
    if (!status_.ok()) return status_;
    if (pos_ != end_) return Fail(pos_, "unexpected ')'");
    std::string out = "(";
    if (!anchored_start) out += "char* ";
    out += expr;
    if (!anchored_end) out += " char*";
    out += ")";
    return out;
  }

 private:
  bool EscapedAt(size_t i) const {
    size_t backslashes = 0;
    while (i > backslashes && p_[i - 1 - backslashes] == '\\') ++backslashes;
    return backslashes % 2 == 1;
  }
  bool AtEnd() const { return pos_ >= end_; }
  char Peek() const { return AtEnd() ? '\0' : p_[pos_]; }

  Status Fail(size_t at, const std::string& why) {
    if (status_.ok()) {
      status_ = Status::InvalidArgument(fmt::format("pattern offset {}: {}", at, why));
    }
    return status_;
  }

  std::string Alternation(int depth) {
    if (depth > 100) {
      Fail(pos_, "groups nested too deeply");
      return "";
    }
    std::string out = "(" + Sequence(depth);
    while (status_.ok() && Peek() == '|') {
      ++pos_;
      out += " | " + Sequence(depth);
      CheckSize(out);
    }
    return out + ")";
  }

  std::string Sequence(int depth) {
    std::string out;
    while (status_.ok() && !AtEnd() && Peek() != '|' && Peek() != ')') {
      std::string atom = Atom(depth);
      if (!status_.ok()) break;
      atom = Quantifiers(std::move(atom));
      out += atom + " ";
      if (!CheckSize(out)) break;
    }
    return out.empty() ? "\"\"" : out;
  }

  // Fails once an expression being built passes max_bytes_ (every part of the result is built in
  // one of them, so nothing grows past it).
  bool CheckSize(const std::string& expr) {
    if (expr.size() <= max_bytes_) return true;
    Fail(pos_, fmt::format("the pattern's grammar passes {} bytes", max_bytes_));
    return false;
  }

  // The atom with its quantifier (and a lazy `?`, which changes nothing here). A quantifier after
  // that is refused, as ECMA-262 and Python do ("a???", "a+*"): one wrap per atom.
  std::string Quantifiers(std::string atom) {
    if (!status_.ok() || AtEnd()) return atom;
    const char c = Peek();
    const size_t at = pos_;
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      q = Braces();
    } else {
      return atom;
    }
    if (!status_.ok()) return atom;
    if (Peek() == '?') ++pos_;  // lazy: the same language
    if (Peek() == '+' || Peek() == '*' || Peek() == '{' || Peek() == '?') {
      Fail(at, "a quantifier may not follow another quantifier");
      return atom;
    }
    return "(" + atom + ")" + q;
  }

  std::string Braces() {
    const size_t open = pos_++;
    uint64_t m = 0, n = 0;
    if (!Number(&m)) return Fail(open, "'{' that is not a quantifier (escape it as \\{)"), "";
    std::string q = fmt::format("{{{}", m);
    if (Peek() == ',') {
      ++pos_;
      if (Peek() >= '0' && Peek() <= '9') {
        if (!Number(&n)) return "";
        if (n < m) return Fail(open, "quantifier maximum below its minimum"), "";
        q += fmt::format(",{}", n);
      } else {
        q += ",";
      }
    }
    if (Peek() != '}') return Fail(open, "'{' that is not a quantifier (escape it as \\{)"), "";
    ++pos_;
    return q + "}";
  }

  bool Number(uint64_t* out) {
    if (!(Peek() >= '0' && Peek() <= '9')) return false;
    *out = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      *out = *out * 10 + (Peek() - '0');
      ++pos_;
      if (*out > max_rep_) {
        Fail(pos_, fmt::format("quantifier above the limit {}", max_rep_));
        return false;
      }
    }
    return true;
  }

  std::string Atom(int depth) {
    const size_t at = pos_;
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (Peek() == '?') {
        if (pos_ + 1 < end_ && p_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          return Fail(at, "only (?:...) groups are supported (no lookaround, named groups or flags)"), "";
        }
      }
      std::string inner = Alternation(depth + 1);
      if (!status_.ok()) return "";
      if (Peek() != ')') return Fail(at, "unclosed '('"), "";
      ++pos_;
      return inner;
    }
    if (c == '[') return ClassAtom();
    if (c == '.') {
      ++pos_;
      return JsonCharFragment(CodePointSet({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}).Complement());
    }
    if (c == '^' || c == '$') return Fail(at, fmt::format("'{}' is only supported at the very {} of the pattern", c, c == '^' ? "start" : "end")), "";
    if (c == '*' || c == '+' || c == '?') return Fail(at, "quantifier with nothing to repeat"), "";
    if (c == '{') return Fail(at, "'{' that is not a quantifier (escape it as \\{)"), "";
    if (c == '\\') {
      CodePointSet set;
      if (!Escape(false, &set)) return "";
      return JsonCharFragment(set);
    }
    uint32_t cp = 0;
    if (!DecodeUtf8(p_.substr(0, end_), &pos_, &cp)) return Fail(at, "invalid UTF-8"), "";
    return JsonCharFragment(CodePointSet::Single(cp));
  }

  // An escape at pos_ ('\\'), as a set. In a class, \b is a backspace... refused for clarity.
  bool Escape(bool in_negated_class, CodePointSet* out) {
    const size_t at = pos_;
    ++pos_;
    if (AtEnd()) return Fail(at, "pattern ends with '\\'"), false;
    const char e = Peek();
    ++pos_;
    auto shorthand = [&](CodePointSet s) {
      if (in_negated_class) return Fail(at, "\\d \\w \\s and their negations are not supported in a negated class"), false;
      *out = std::move(s);
      return true;
    };
    switch (e) {
      case 'd': return shorthand(Digits());
      case 'w': return shorthand(WordChars());
      case 's': return shorthand(Spaces());
      case 'D': return shorthand(PrintableAscii().Minus(Digits()));
      case 'W': return shorthand(PrintableAscii().Minus(WordChars()));
      case 'S': return shorthand(PrintableAscii().Minus(Spaces()));
      case 'n': *out = CodePointSet::Single('\n'); return true;
      case 'r': *out = CodePointSet::Single('\r'); return true;
      case 't': *out = CodePointSet::Single('\t'); return true;
      case 'f': *out = CodePointSet::Single('\f'); return true;
      case 'v': *out = CodePointSet::Single('\v'); return true;
      case 'x': return Hex(2, at, out);
      case 'u': return Hex(4, at, out);
      default: break;
    }
    const auto u = static_cast<unsigned char>(e);
    if (u < 0x80 && !std::isalnum(u)) {
      *out = CodePointSet::Single(u);
      return true;
    }
    return Fail(at, fmt::format("unsupported escape '\\{}'", e)), false;
  }

  bool Hex(int digits, size_t at, CodePointSet* out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char c = Peek();
      int h = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (h < 0) return Fail(at, fmt::format("expected {} hex digits", digits)), false;
      v = v * 16 + h;
    }
    if (IsSurrogate(v)) return Fail(at, "surrogate code points are not supported"), false;
    *out = CodePointSet::Single(v);
    return true;
  }

  std::string ClassAtom() {
    const size_t open = pos_++;
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodePointRange> ranges;
    bool first = true;
    while (status_.ok()) {
      if (AtEnd()) return Fail(open, "unclosed '['"), "";
      if (Peek() == ']') {
        if (first) return Fail(pos_, "']' first in a class is read differently by regex dialects (escape it)"), "";
        break;
      }
      first = false;
      uint32_t lo = 0;
      if (!ClassChar(negated, &lo, &ranges)) continue;
      uint32_t hi = lo;
      if (Peek() == '-' && pos_ + 1 < end_ && p_[pos_ + 1] != ']') {
        ++pos_;
        std::vector<CodePointRange> ignored;
        const size_t at = pos_;
        if (!ClassChar(negated, &hi, &ignored)) {
          if (status_.ok()) Fail(at, "a class shorthand cannot end a range");
          return "";
        }
        if (hi < lo) return Fail(at, "range out of order"), "";
      }
      ranges.push_back({lo, hi});
    }
    if (!status_.ok()) return "";
    ++pos_;
    CodePointSet set(std::move(ranges));
    if (negated) set = set.Complement();
    if (set.empty()) return Fail(open, "class matches no character"), "";
    return JsonCharFragment(set);
  }

  // One class member: true with *cp for a single character; false with the set added to `ranges`
  // for a shorthand (or on error).
  bool ClassChar(bool negated, uint32_t* cp, std::vector<CodePointRange>* ranges) {
    const size_t at = pos_;
    if (Peek() == '\\') {
      CodePointSet set;
      if (!Escape(negated, &set)) return false;
      if (set.ranges().size() == 1 && set.ranges()[0].lo == set.ranges()[0].hi) {
        *cp = set.Min();
        return true;
      }
      ranges->insert(ranges->end(), set.ranges().begin(), set.ranges().end());
      return false;
    }
    if (Peek() == '[') return Fail(at, "nested '[' in a class is not supported (escape it)"), false;
    if (!DecodeUtf8(p_.substr(0, end_), &pos_, cp)) return Fail(at, "invalid UTF-8"), false;
    return true;
  }

  std::string_view p_;
  uint32_t max_rep_;
  size_t max_bytes_;
  size_t pos_ = 0;
  size_t end_ = 0;
  Status status_;
};

}  // namespace

std::string JsonCharFragment(const CodePointSet& set) {
  std::vector<std::string> parts;
  const CodePointSet raw = set.Minus(CodePointSet(RawJsonChars().Complement()));
  if (!raw.empty()) parts.push_back(raw.ToGbnfClass());
  const CodePointSet escaped = set.Minus(RawJsonChars());
  for (const CodePointRange& r : escaped.ranges()) {
    for (uint32_t cp = r.lo; cp <= r.hi; ++cp) parts.push_back(EscapeFragment(cp));
  }
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out + ")";
}

common::StatusOr<std::string> PatternToGbnf(std::string_view pattern, uint32_t max_repetition, size_t max_bytes) {
  return PatternParser(pattern, max_repetition, max_bytes).Parse();
}

}  // namespace niels::daemon::grammar
