#include "daemon/text/jinja/py_text.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace niels::daemon::text::jinja {
namespace {

icu::UnicodeString ToIcu(std::string_view s) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
}

std::string FromIcu(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool IsCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

// Full case mapping of one code point (upper, lower or title).
enum class CaseKind { kUpper, kLower, kTitle };
std::string MapOne(char32_t c, CaseKind kind) {
  icu::UnicodeString u(static_cast<UChar32>(c));
  const icu::Locale& root = icu::Locale::getRoot();
  switch (kind) {
    case CaseKind::kUpper:
      u.toUpper(root);
      break;
    case CaseKind::kLower:
      u.toLower(root);
      break;
    case CaseKind::kTitle:
      u.toTitle(nullptr, root, U_TITLECASE_NO_BREAK_ADJUSTMENT | U_TITLECASE_NO_LOWERCASE);
      break;
  }
  return FromIcu(u);
}

template <typename Pred>
bool AllCodePoints(std::string_view s, Pred pred) {
  if (s.empty()) return false;
  for (char32_t c : DecodeUtf8(s)) {
    if (!pred(c)) return false;
  }
  return true;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    char32_t c = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      n = 1, c = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 2, c = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 3, c = b & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto cb = static_cast<unsigned char>(s[i + k]);
      if ((cb & 0xC0) != 0x80) return false;
      c = (c << 6) | (cb & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid.
    if ((n == 1 && c < 0x80) || (n == 2 && c < 0x800) || (n == 3 && c < 0x10000)) return false;
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) return false;
    i += n + 1;
  }
  return true;
}

char32_t CodePointAt(std::string_view s, size_t pos, size_t* length) {
  const auto b = static_cast<unsigned char>(s[pos]);
  size_t n = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : 3;
  char32_t c = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k <= n && pos + k < s.size(); ++k) {
    c = (c << 6) | (static_cast<unsigned char>(s[pos + k]) & 0x3F);
  }
  *length = n + 1;
  return c;
}

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t n;
    out.push_back(CodePointAt(s, i, &n));
    i += n;
  }
  return out;
}

void AppendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(out, c);
  return out;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

bool IsPySpace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  const auto uc = static_cast<UChar32>(c);
  if (u_charType(uc) == U_SPACE_SEPARATOR) return true;
  const UCharDirection dir = u_charDirection(uc);
  return dir == U_WHITE_SPACE_NEUTRAL || dir == U_BLOCK_SEPARATOR || dir == U_SEGMENT_SEPARATOR;
}

std::string_view StripPySpace(std::string_view s, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t n;
      if (!IsPySpace(CodePointAt(s, begin, &n))) break;
      begin += n;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t n;
      if (!IsPySpace(CodePointAt(s, start, &n))) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

std::string StripChars(std::string_view s, std::string_view chars, bool left, bool right) {
  const std::u32string set = DecodeUtf8(chars);
  const std::u32string text = DecodeUtf8(s);
  size_t begin = 0, end = text.size();
  auto in_set = [&](char32_t c) { return set.find(c) != std::u32string::npos; };
  if (left) {
    while (begin < end && in_set(text[begin])) ++begin;
  }
  if (right) {
    while (end > begin && in_set(text[end - 1])) --end;
  }
  return EncodeUtf8(std::u32string_view(text).substr(begin, end - begin));
}

std::string PyUpper(std::string_view s) {
  icu::UnicodeString u = ToIcu(s);
  u.toUpper(icu::Locale::getRoot());
  return FromIcu(u);
}

std::string PyLower(std::string_view s) {
  icu::UnicodeString u = ToIcu(s);
  u.toLower(icu::Locale::getRoot());
  return FromIcu(u);
}

std::string PyCapitalize(std::string_view s) {
  if (s.empty()) return std::string();
  size_t n;
  const char32_t first = CodePointAt(s, 0, &n);
  return MapOne(first, CaseKind::kTitle) + PyLower(s.substr(n));
}

std::string PyTitle(std::string_view s) {
  // Python: a character after a cased character is lowercased, any other is titlecased.
  std::string out;
  bool previous_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    out += MapOne(c, previous_cased ? CaseKind::kLower : CaseKind::kTitle);
    previous_cased = IsCased(c);
  }
  return out;
}

bool PyIsAlpha(std::string_view s) {
  return AllCodePoints(s, [](char32_t c) { return u_isalpha(static_cast<UChar32>(c)) != 0; });
}
bool PyIsDigit(std::string_view s) {
  return AllCodePoints(s, [](char32_t c) {
    const int32_t type = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
    return type == U_NT_DIGIT || type == U_NT_DECIMAL;
  });
}
bool PyIsAlnum(std::string_view s) {
  return AllCodePoints(s, [](char32_t c) {
    const int32_t type = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
    return u_isalpha(static_cast<UChar32>(c)) || type != U_NT_NONE;
  });
}
bool PyIsSpace(std::string_view s) { return AllCodePoints(s, IsPySpace); }

bool PyIsLower(std::string_view s) {
  bool cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    const auto uc = static_cast<UChar32>(c);
    if (u_isupper(uc) || u_istitle(uc)) return false;
    cased = cased || u_islower(uc);
  }
  return cased;
}
bool PyIsUpper(std::string_view s) {
  bool cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    const auto uc = static_cast<UChar32>(c);
    if (u_islower(uc) || u_istitle(uc)) return false;
    cased = cased || u_isupper(uc);
  }
  return cased;
}

bool IsIdentifierStart(char32_t c) {
  if (c < 0x80) return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_XID_START);
}
bool IsIdentifierContinue(char32_t c) {
  if (c < 0x80) return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_XID_CONTINUE);
}

int64_t CodePointFromName(std::string_view name) {
  UErrorCode status = U_ZERO_ERROR;
  const std::string n(name);
  UChar32 c = u_charFromName(U_UNICODE_CHAR_NAME, n.c_str(), &status);
  if (U_FAILURE(status)) {
    status = U_ZERO_ERROR;
    c = u_charFromName(U_CHAR_NAME_ALIAS, n.c_str(), &status);
  }
  return U_FAILURE(status) ? -1 : c;
}

std::string PyReprString(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else {
      // Python's isprintable: not Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs.
      const int8_t type = u_charType(static_cast<UChar32>(c));
      const bool printable = type != U_CONTROL_CHAR && type != U_FORMAT_CHAR && type != U_SURROGATE &&
                             type != U_PRIVATE_USE_CHAR && type != U_UNASSIGNED && type != U_LINE_SEPARATOR &&
                             type != U_PARAGRAPH_SEPARATOR && type != U_SPACE_SEPARATOR;
      if (printable) {
        AppendUtf8(out, c);
      } else {
        char buf[16];
        if (c < 0x100) {
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
        } else if (c < 0x10000) {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        } else {
          std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
        }
        out += buf;
      }
    }
  }
  out.push_back(quote);
  return out;
}

std::string PyReprFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form: "d.ddde[+-]x".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  bool negative = false;
  if (!mantissa.empty() && mantissa[0] == '-') {
    negative = true;
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    // Fixed notation with at least one digit after the point.
    const int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

}  // namespace niels::daemon::text::jinja
