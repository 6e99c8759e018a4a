#include "daemon/text/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "daemon/text/jinja/py_text.h"

namespace niels::daemon::text::jinja {
namespace {

// Longest first, as Jinja2 matches them.
constexpr std::string_view kOperators[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                           "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "\r\n" and "\r" as "\n"; one trailing newline dropped (keep_trailing_newline off).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options) : src_(NormalizeNewlines(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> Run() {
    size_t p = 0;
    while (p < src_.size()) p = LexData(p);
    Emit(Token::Type::kEof, src_.size());
    return std::move(out_);
  }

 private:
  SourcePos PosAt(size_t offset) {
    // Tokens come in source order: continue from the previous position when it is on the same
    // line (counting from the line start for every token made long lines quadratic).
    if (offset >= cached_offset_ && (cached_line_ >= line_starts_.size() || offset < line_starts_[cached_line_])) {
      cached_column_ +=
          static_cast<int>(CodePointCount(std::string_view(src_).substr(cached_offset_, offset - cached_offset_)));
      cached_offset_ = offset;
      return SourcePos{static_cast<int>(cached_line_), cached_column_ + 1};
    }
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_start = *(it - 1);
    cached_line_ = static_cast<size_t>(it - line_starts_.begin());
    cached_offset_ = offset;
    cached_column_ = static_cast<int>(CodePointCount(std::string_view(src_).substr(line_start, offset - line_start)));
    return SourcePos{static_cast<int>(cached_line_), cached_column_ + 1};
  }

  Token& Emit(Token::Type type, size_t offset, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.pos = PosAt(offset);
    out_.push_back(std::move(t));
    return out_.back();
  }

  bool At(size_t p, std::string_view s) const {
    return p < src_.size() && src_[p] == s[0] && src_.compare(p, s.size(), s) == 0;
  }

  // The end of the run of Python whitespace starting at p.
  size_t SkipSpace(size_t p) const {
    while (p < src_.size()) {
      size_t n;
      if (!IsPySpace(CodePointAt(src_, p, &n))) break;
      p += n;
    }
    return p;
  }

  // The earliest "{{", "{%" or "{#" at or after p, or npos.
  size_t FindTagStart(size_t p) const {
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
      ++p;
    }
    return std::string::npos;
  }

  // Text before a tag, with the tag's whitespace control applied (Jinja2's OptionalLStrip).
  void EmitText(size_t begin, size_t end, char sign, bool is_variable) {
    std::string_view text = std::string_view(src_).substr(begin, end - begin);
    if (sign == '-') {
      text = StripPySpace(text, false, true);
    } else if (sign != '+' && options_.lstrip_blocks && !is_variable) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
          StripPySpace(text.substr(l_pos), true, false).empty()) {
        text = text.substr(0, l_pos);
      }
    }
    if (!text.empty()) Emit(Token::Type::kText, begin, std::string(text));
  }

  // Lexes text up to and including the next tag; returns the position after it.
  size_t LexData(size_t p) {
    const size_t t = FindTagStart(p);
    if (t == std::string::npos) {
      Emit(Token::Type::kText, p, src_.substr(p));
      return src_.size();
    }
    const char kind = src_[t + 1];
    size_t after = t + 2;
    char sign = 0;
    if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
    size_t raw_end = 0;
    if (kind == '%' && MatchRawTag(t, "raw", &raw_end, false)) {
      EmitText(p, t, sign, false);
      return LexRaw(raw_end);
    }
    EmitText(p, t, sign, kind == '{');
    line_starting_ = false;
    if (kind == '#') return SkipComment(t, after);
    Emit(kind == '%' ? Token::Type::kBlockBegin : Token::Type::kVarBegin, t);
    return LexTag(t, after, kind == '%');
  }

  // Matches `{%[-+]?\s*NAME\s*` then `-%}\s*` or `%}` (plus, when `tag_end_trims`, the other
  // block ends: `+%}` and `%}\n?`) at p; *end is the position after it.
  bool MatchRawTag(size_t p, std::string_view name, size_t* end, bool tag_end_trims) const {
    if (!At(p, "{%")) return false;
    size_t q = p + 2;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
    q = SkipSpace(q);
    if (!At(q, name)) return false;
    q = SkipSpace(q + name.size());
    if (tag_end_trims && At(q, "+%}")) {
      *end = q + 3;
    } else if (At(q, "-%}")) {
      *end = SkipSpace(q + 3);
    } else if (At(q, "%}")) {
      *end = q + 2;
      if (tag_end_trims && options_.trim_blocks && At(*end, "\n")) ++*end;
    } else {
      return false;
    }
    return true;
  }

  size_t LexRaw(size_t begin) {
    for (size_t q = FindTagStart(begin); q != std::string::npos; q = FindTagStart(q + 1)) {
      size_t end;
      if (MatchRawTag(q, "endraw", &end, true)) {
        const char sign = (src_[q + 2] == '-' || src_[q + 2] == '+') ? src_[q + 2] : 0;
        EmitText(begin, q, sign, false);
        line_starting_ = src_[end - 1] == '\n';
        return end;
      }
    }
    ThrowSyntax("Missing end of raw directive", PosAt(begin));
  }

  size_t SkipComment(size_t tag_start, size_t p) {
    for (; p < src_.size(); ++p) {
      size_t end = 0;
      if (At(p, "+#}")) {
        end = p + 3;
      } else if (At(p, "-#}")) {
        end = SkipSpace(p + 3);
      } else if (At(p, "#}")) {
        end = p + 2;
        if (options_.trim_blocks && At(end, "\n")) ++end;
      } else {
        continue;
      }
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
    ThrowSyntax("Missing end of comment tag", PosAt(tag_start));
  }

  // Lexes the inside of a tag opened at tag_start, from p to its end; returns the position after.
  size_t LexTag(size_t tag_start, size_t p, bool block) {
    std::vector<char> balance;
    while (true) {
      if (p >= src_.size()) {
        ThrowSyntax(std::string("unexpected end of template: the tag opened here is never closed by '") +
                        (block ? "%}" : "}}") + "'",
                    PosAt(tag_start));
      }
      if (balance.empty()) {
        size_t end = 0;
        if (block && At(p, "+%}")) {
          end = p + 3;
        } else if (At(p, block ? "-%}" : "-}}")) {
          end = SkipSpace(p + 3);
        } else if (At(p, block ? "%}" : "}}")) {
          end = p + 2;
          if (block && options_.trim_blocks && At(end, "\n")) ++end;
        }
        if (end != 0) {
          Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, p);
          line_starting_ = src_[end - 1] == '\n';
          return end;
        }
      }
      const size_t next = SkipSpace(p);
      if (next != p) {
        p = next;
        continue;
      }
      p = LexExpressionToken(p, balance);
    }
  }

  // `(\d+_)*\d+` at p: the end, or npos.
  size_t MatchDigits(size_t p) const {
    if (p >= src_.size() || !IsDigit(src_[p])) return std::string::npos;
    while (true) {
      while (p < src_.size() && IsDigit(src_[p])) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && IsDigit(src_[p + 1])) {
        ++p;
        continue;
      }
      return p;
    }
  }

  size_t MatchExponent(size_t p) const {
    if (p >= src_.size() || (src_[p] != 'e' && src_[p] != 'E')) return std::string::npos;
    ++p;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    return MatchDigits(p);
  }

  size_t MatchFloat(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return std::string::npos;
    const size_t int_end = MatchDigits(p);
    if (int_end == std::string::npos) return int_end;
    size_t frac_end = std::string::npos;
    if (int_end < src_.size() && src_[int_end] == '.') frac_end = MatchDigits(int_end + 1);
    if (frac_end != std::string::npos) {
      const size_t e = MatchExponent(frac_end);
      if (e != std::string::npos) return e;
    }
    const size_t e = MatchExponent(int_end);
    if (e != std::string::npos) return e;
    return frac_end;
  }

  // Jinja2's integer rule; sets *base. The end, or npos.
  size_t MatchInt(size_t p, int* base) const {
    auto prefixed = [&](char letter, int b) -> size_t {
      if (!(src_[p] == '0' && p + 1 < src_.size() && (src_[p + 1] | 0x20) == letter)) return std::string::npos;
      size_t q = p + 2;
      size_t last = std::string::npos;
      while (true) {
        size_t r = q;
        if (r < src_.size() && src_[r] == '_') ++r;
        if (r < src_.size() && HexValue(src_[r]) >= 0 && HexValue(src_[r]) < b) {
          q = last = r + 1;
        } else {
          return last;
        }
      }
    };
    for (auto [letter, b] : {std::pair{'b', 2}, std::pair{'o', 8}, std::pair{'x', 16}}) {
      const size_t end = prefixed(letter, b);
      if (end != std::string::npos) {
        *base = b;
        return end;
      }
    }
    *base = 10;
    if (src_[p] >= '1' && src_[p] <= '9') {
      size_t q = p + 1;
      while (true) {
        size_t r = q;
        if (r < src_.size() && src_[r] == '_') ++r;
        if (r < src_.size() && IsDigit(src_[r])) {
          q = r + 1;
        } else {
          return q;
        }
      }
    }
    if (src_[p] == '0') {
      size_t q = p + 1;
      while (true) {
        size_t r = q;
        if (r < src_.size() && src_[r] == '_') ++r;
        if (r < src_.size() && src_[r] == '0') {
          q = r + 1;
        } else {
          return q;
        }
      }
    }
    return std::string::npos;
  }

  size_t LexExpressionToken(size_t p, std::vector<char>& balance) {
    if (size_t end = MatchFloat(p); end != std::string::npos) {
      std::string digits;
      for (size_t i = p; i < end; ++i) {
        if (src_[i] != '_') digits.push_back(src_[i]);
      }
      Emit(Token::Type::kFloat, p).float_value = std::strtod(digits.c_str(), nullptr);
      return end;
    }
    int base = 10;
    if (size_t end = MatchInt(p, &base); end != std::string::npos) {
      std::string digits;
      for (size_t i = p + (base == 10 ? 0 : 2); i < end; ++i) {
        if (src_[i] != '_') digits.push_back(src_[i]);
      }
      errno = 0;
      const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
      if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
        ThrowSyntax("integer literal out of the 64-bit range", PosAt(p));
      }
      Emit(Token::Type::kInt, p).int_value = static_cast<int64_t>(v);
      return end;
    }
    size_t n;
    if (IsIdentifierStart(CodePointAt(src_, p, &n))) {
      size_t end = p + n;
      while (end < src_.size() && IsIdentifierContinue(CodePointAt(src_, end, &n))) end += n;
      Emit(Token::Type::kName, p, src_.substr(p, end - p));
      return end;
    }
    if (src_[p] == '\'' || src_[p] == '"') {
      const size_t end = StringEnd(p);
      if (end != std::string::npos) {
        Emit(Token::Type::kString, p, DecodeString(p + 1, end - 1));
        return end;
      }
    }
    for (std::string_view op : kOperators) {
      if (src_[p] != op[0] || !At(p, op)) continue;
      Balance(op, p, balance);
      Emit(Token::Type::kOperator, p, std::string(op));
      return p + op.size();
    }
    CodePointAt(src_, p, &n);
    ThrowSyntax("unexpected char " + PyReprString(src_.substr(p, n)) + " at " + std::to_string(p), PosAt(p));
  }

  void Balance(std::string_view op, size_t p, std::vector<char>& balance) {
    if (op == "{" || op == "(" || op == "[") {
      balance.push_back(op == "{" ? '}' : op == "(" ? ')' : ']');
    } else if (op == "}" || op == ")" || op == "]") {
      if (balance.empty()) ThrowSyntax("unexpected '" + std::string(op) + "'", PosAt(p));
      if (balance.back() != op[0]) {
        ThrowSyntax("unexpected '" + std::string(op) + "', expected '" + std::string(1, balance.back()) + "'",
                    PosAt(p));
      }
      balance.pop_back();
    }
  }

  // The position after the closing quote of the string literal at p, or npos.
  size_t StringEnd(size_t p) const {
    const char quote = src_[p];
    for (size_t q = p + 1; q < src_.size(); ++q) {
      if (src_[q] == '\\') {
        ++q;
      } else if (src_[q] == quote) {
        return q + 1;
      }
    }
    return std::string::npos;
  }

  // Jinja2 decodes a literal with Python's "unicode-escape" codec after escaping its non-ASCII
  // characters (backslashreplace): Python's string escapes, unknown ones kept as written.
  std::string DecodeString(size_t begin, size_t end) {
    std::string ascii;
    for (char32_t c : DecodeUtf8(std::string_view(src_).substr(begin, end - begin))) {
      if (c < 0x80) {
        ascii.push_back(static_cast<char>(c));
      } else {
        char buf[16];
        std::snprintf(buf, sizeof buf,
                      c < 0x100     ? "\\x%02x"
                      : c < 0x10000 ? "\\u%04x"
                                    : "\\U%08x",
                      static_cast<unsigned>(c));
        ascii += buf;
      }
    }
    return UnicodeEscape(ascii, PosAt(begin - 1));
  }

  static std::string UnicodeEscape(const std::string& s, SourcePos pos) {
    std::string out;
    auto hex = [&](size_t& i, int digits, const char* what) -> char32_t {
      char32_t v = 0;
      for (int k = 0; k < digits; ++k, ++i) {
        if (i >= s.size() || HexValue(s[i]) < 0) ThrowSyntax(std::string("truncated ") + what + " escape", pos);
        v = v * 16 + static_cast<char32_t>(HexValue(s[i]));
      }
      return v;
    };
    for (size_t i = 0; i < s.size();) {
      if (s[i] != '\\') {
        out.push_back(s[i++]);
        continue;
      }
      if (++i >= s.size()) ThrowSyntax("\\ at end of string", pos);
      const char e = s[i++];
      char32_t c = 0;
      switch (e) {
        case '\n':
          continue;
        case '\\':
        case '\'':
        case '"':
          c = static_cast<char32_t>(e);
          break;
        case 'a':
          c = 7;
          break;
        case 'b':
          c = 8;
          break;
        case 'f':
          c = 12;
          break;
        case 'n':
          c = 10;
          break;
        case 'r':
          c = 13;
          break;
        case 't':
          c = 9;
          break;
        case 'v':
          c = 11;
          break;
        case 'x':
          c = hex(i, 2, "\\xXX");
          break;
        case 'u':
          c = hex(i, 4, "\\uXXXX");
          break;
        case 'U':
          c = hex(i, 8, "\\UXXXXXXXX");
          break;
        case 'N': {
          const size_t close = s.find('}', i);
          if (i >= s.size() || s[i] != '{' || close == std::string::npos || close == i + 1) {
            ThrowSyntax("malformed \\N character escape", pos);
          }
          const int64_t named = CodePointFromName(std::string_view(s).substr(i + 1, close - i - 1));
          if (named < 0) ThrowSyntax("unknown Unicode character name", pos);
          c = static_cast<char32_t>(named);
          i = close + 1;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            c = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++k) c = c * 8 + (s[i++] - '0');
            break;
          }
          out.push_back('\\');
          out.push_back(e);
          continue;
      }
      if (c > 0x10FFFF) ThrowSyntax("illegal Unicode character", pos);
      if (c >= 0xD800 && c <= 0xDFFF) ThrowSyntax("surrogate code points are not supported in strings", pos);
      AppendUtf8(out, c);
    }
    return out;
  }

  std::string src_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  bool line_starting_ = true;
  // PosAt's last answer: byte offset, 1-based line, 0-based column.
  size_t cached_offset_ = 0;
  size_t cached_line_ = 1;
  int cached_column_ = 0;
};

}  // namespace

std::vector<Token> Tokenize(std::string_view source, const LexerOptions& options) {
  if (!IsValidUtf8(source)) ThrowSyntax("the template is not valid UTF-8", SourcePos{1, 1});
  return Lexer(source, options).Run();
}

}  // namespace niels::daemon::text::jinja
