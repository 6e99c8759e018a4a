#include "daemon/text/utf8_repair.h"

#include <cstdint>

namespace niels::daemon::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// The range the byte after lead byte `lead` must fall in (Unicode Table 3-7), and how many
// continuation bytes the sequence has in all. Returns false for a byte that cannot lead.
bool LeadInfo(uint8_t lead, uint8_t* second_lo, uint8_t* second_hi, int* continuations) {
  *second_lo = 0x80;
  *second_hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    *continuations = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    *continuations = 2;
    if (lead == 0xE0) *second_lo = 0xA0;  // no overlongs
    if (lead == 0xED) *second_hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    *continuations = 3;
    if (lead == 0xF0) *second_lo = 0x90;  // no overlongs
    if (lead == 0xF4) *second_hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return false;
  }
  return true;
}

// The number of bytes from text[pos] that form either one well-formed sequence (*valid = true)
// or one maximal subpart of an ill-formed one (*valid = false). Always at least 1.
size_t NextUnit(std::string_view text, size_t pos, bool* valid) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  if (lead < 0x80) {
    *valid = true;
    return 1;
  }
  uint8_t lo = 0, hi = 0;
  int continuations = 0;
  if (!LeadInfo(lead, &lo, &hi, &continuations)) {
    *valid = false;
    return 1;
  }
  size_t n = 1;
  for (int i = 0; i < continuations; ++i) {
    if (pos + n >= text.size()) break;
    const auto b = static_cast<uint8_t>(text[pos + n]);
    const bool in_range = i == 0 ? (b >= lo && b <= hi) : IsContinuation(b);
    if (!in_range) break;
    ++n;
  }
  *valid = n == static_cast<size_t>(continuations) + 1;
  return n;
}

}  // namespace

size_t WellFormedSequenceLength(std::string_view text, size_t pos) {
  bool valid = false;
  const size_t n = NextUnit(text, pos, &valid);
  return valid ? n : 0;
}

size_t ValidUtf8PrefixLength(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII runs eight bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t word = 0;
      for (int i = 0; i < 8; ++i) word |= static_cast<uint64_t>(static_cast<uint8_t>(text[pos + i])) << (8 * i);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    bool valid = false;
    const size_t n = NextUnit(text, pos, &valid);
    if (!valid) return pos;
    pos += n;
  }
  return text.size();
}

std::string RepairUtf8(std::string_view text) {
  size_t pos = ValidUtf8PrefixLength(text);
  std::string out(text.substr(0, pos));
  if (pos == text.size()) return out;
  out.reserve(text.size() + 16);
  while (pos < text.size()) {
    bool valid = false;
    const size_t n = NextUnit(text, pos, &valid);
    if (valid) {
      out.append(text.substr(pos, n));
    } else {
      out.append(kReplacement);
    }
    pos += n;
  }
  return out;
}

}  // namespace niels::daemon::text
