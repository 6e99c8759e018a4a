#include "daemon/text/byte_level.h"

#include <array>

namespace niels::daemon::text {
namespace {

constexpr bool StandsForItself(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> MakeByteToCodePoint() {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) table[b] = StandsForItself(b) ? char32_t(b) : next++;
  return table;
}

constexpr std::array<char32_t, 256> kByteToCodePoint = MakeByteToCodePoint();
constexpr char32_t kLastShifted = 0x100 + 68 - 1;

// Inverse for code points below 0x144: the byte, or -1.
constexpr std::array<int16_t, kLastShifted + 1> MakeCodePointToByte() {
  std::array<int16_t, kLastShifted + 1> table{};
  for (auto& v : table) v = -1;
  for (unsigned b = 0; b < 256; ++b) table[kByteToCodePoint[b]] = static_cast<int16_t>(b);
  return table;
}

constexpr std::array<int16_t, kLastShifted + 1> kCodePointToByte = MakeCodePointToByte();

}  // namespace

char32_t ByteToCodePoint(uint8_t b) { return kByteToCodePoint[b]; }

std::optional<uint8_t> CodePointToByte(char32_t c) {
  if (c > kLastShifted || kCodePointToByte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(kCodePointToByte[c]);
}

void AppendByteLevel(std::string_view bytes, std::string* out) {
  for (char ch : bytes) {
    const char32_t c = kByteToCodePoint[static_cast<uint8_t>(ch)];
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
    } else {  // every code point of the alphabet is below U+0800: two UTF-8 bytes
      out->push_back(static_cast<char>(0xC0 | (c >> 6)));
      out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
}

bool AppendDecodedByteLevel(std::string_view piece, std::string* out) {
  const size_t original = out->size();
  for (size_t i = 0; i < piece.size();) {
    const auto b0 = static_cast<uint8_t>(piece[i]);
    char32_t c = 0;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < piece.size() &&
               (static_cast<uint8_t>(piece[i + 1]) & 0xC0) == 0x80) {
      c = (char32_t(b0 & 0x1F) << 6) | (static_cast<uint8_t>(piece[i + 1]) & 0x3F);
      if (c < 0x80) c = 0xFFFF;  // an overlong form is no code point of the alphabet
      i += 2;
    } else {
      c = 0xFFFF;  // a longer sequence (or broken UTF-8): outside the alphabet
    }
    const auto byte = CodePointToByte(c);
    if (!byte) {
      out->resize(original);
      return false;
    }
    out->push_back(static_cast<char>(*byte));
  }
  return true;
}

std::optional<std::string> DecodeByteLevel(std::string_view piece) {
  std::string out;
  if (!AppendDecodedByteLevel(piece, &out)) return std::nullopt;
  return out;
}

}  // namespace niels::daemon::text
