#pragma once
// Python str semantics over UTF-8 strings: code points, whitespace, case mapping, repr and float
// formatting, as the Python 3 that runs Jinja2 defines them. Character properties come from ICU
// (Python's isspace is "bidirectional class WS, B or S, or category Zs"; case mapping is Unicode's
// full mapping, as Python's str.upper/lower use).
//
// Every function here takes valid UTF-8 (the template source and the context are checked when
// they come in). Stateless, thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace niels::daemon::text::jinja {

bool IsValidUtf8(std::string_view s);
// The code points of `s`.
std::u32string DecodeUtf8(std::string_view s);
void AppendUtf8(std::string& out, char32_t c);
std::string EncodeUtf8(std::u32string_view s);
size_t CodePointCount(std::string_view s);
// The code point starting at byte `pos` and its length in bytes. REQUIRES: pos < s.size().
char32_t CodePointAt(std::string_view s, size_t pos, size_t* length);

// Python str.isspace() of one code point (also what Python's regex \s matches).
bool IsPySpace(char32_t c);
// str.strip()/lstrip()/rstrip() without arguments.
std::string_view StripPySpace(std::string_view s, bool left, bool right);
// str.strip(chars) with an explicit set of characters.
std::string StripChars(std::string_view s, std::string_view chars, bool left, bool right);

// str.upper(), str.lower(), str.capitalize(), str.title() (full Unicode case mapping).
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyCapitalize(std::string_view s);
std::string PyTitle(std::string_view s);
// str.isalpha() etc. on a whole string (false for "").
bool PyIsAlpha(std::string_view s);
bool PyIsDigit(std::string_view s);
bool PyIsAlnum(std::string_view s);
bool PyIsLower(std::string_view s);
bool PyIsUpper(std::string_view s);
bool PyIsSpace(std::string_view s);
// A code point that may start / continue a Python identifier (XID_Start plus '_' / XID_Continue).
bool IsIdentifierStart(char32_t c);
bool IsIdentifierContinue(char32_t c);
// The code point named `name` (Unicode character name, as in "\N{...}"), or -1.
int64_t CodePointFromName(std::string_view name);

// repr() of a str: quoted with ' (or " when the text holds ' and no "), escapes as Python writes
// them, printable non-ASCII kept.
std::string PyReprString(std::string_view s);
// repr() (= str()) of a float: the shortest digits that read back, Python's layout ("1.0",
// "1e-05", "1e+16", "inf", "nan").
std::string PyReprFloat(double d);

}  // namespace niels::daemon::text::jinja
