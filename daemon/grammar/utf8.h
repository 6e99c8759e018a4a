#pragma once
// Strict UTF-8 helpers of the grammar room (daemon/grammar): decoding of grammar and schema text,
// encoding of code points, and the byte-by-byte state the matcher keeps inside a character.
//
// "Strict" means RFC 3629: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above
// U+10FFFF. Every grammar in this room matches Unicode scalar values, so everything a matcher
// accepts is valid UTF-8. Header-only, no allocation except EncodeUtf8's string.

#include <cstdint>
#include <string>
#include <string_view>

namespace niels::daemon::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

inline bool IsSurrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }
inline bool IsScalarValue(uint32_t cp) { return cp <= kMaxCodePoint && !IsSurrogate(cp); }

// Bytes of the UTF-8 form of a scalar value (1..4).
inline int Utf8Length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Appends the UTF-8 form of `cp`. REQUIRES: IsScalarValue(cp).
inline void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

inline std::string EncodeUtf8(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

// Decodes one scalar value at text[*pos] and advances *pos past it. Returns false (and leaves *pos)
// when the bytes there are not strict UTF-8 or the text ends inside a character.
inline bool DecodeUtf8(std::string_view text, size_t* pos, uint32_t* cp) {
  const size_t i = *pos;
  if (i >= text.size()) return false;
  const auto b0 = static_cast<uint8_t>(text[i]);
  if (b0 < 0x80) {
    *cp = b0;
    *pos = i + 1;
    return true;
  }
  int n = 0;
  uint32_t v = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 1, v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 2, v = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 3, v = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return false;
  }
  if (i + n >= text.size()) return false;  // the text ends inside the character
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<uint8_t>(text[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  *pos = i + n + 1;
  return true;
}

// A character begun but not finished: what the matcher knows after some of its bytes. `remaining`
// continuation bytes are still due; the next one must lie in [next_lo, next_hi]. The code points it
// can still become are exactly [Low(), High()].
struct PartialChar {
  uint32_t value = 0;      // the payload bits read so far
  uint8_t remaining = 0;   // 0 = at a character boundary
  uint8_t next_lo = 0x80;
  uint8_t next_hi = 0xBF;

  bool active() const { return remaining != 0; }
  uint32_t Low() const {
    const int rest = 6 * (remaining - 1);
    return ((value << 6) | (next_lo & 0x3F)) << rest;
  }
  uint32_t High() const {
    const int rest = 6 * (remaining - 1);
    return (((value << 6) | (next_hi & 0x3F)) << rest) | ((1u << rest) - 1);
  }
  bool operator==(const PartialChar&) const = default;
};

// Starts a character with lead byte `b` (>= 0x80). False for a byte that cannot start one.
inline bool StartPartial(uint8_t b, PartialChar* p) {
  p->next_lo = 0x80, p->next_hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    p->remaining = 1, p->value = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    p->remaining = 2, p->value = b & 0x0F;
    if (b == 0xE0) p->next_lo = 0xA0;
    if (b == 0xED) p->next_hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    p->remaining = 3, p->value = b & 0x07;
    if (b == 0xF0) p->next_lo = 0x90;
    if (b == 0xF4) p->next_hi = 0x8F;
  } else {
    return false;
  }
  return true;
}

// Feeds a continuation byte. False when `b` cannot continue the character. When it completes the
// character, p->remaining becomes 0 and p->value is the code point.
inline bool ContinuePartial(uint8_t b, PartialChar* p) {
  if (b < p->next_lo || b > p->next_hi) return false;
  p->value = (p->value << 6) | (b & 0x3F);
  --p->remaining;
  p->next_lo = 0x80, p->next_hi = 0xBF;
  return true;
}

}  // namespace niels::daemon::grammar
