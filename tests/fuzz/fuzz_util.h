#pragma once
// Small helpers shared by the fuzz targets (tests/fuzz/*_fuzz.cc). Header-only, no dependencies.
//
// FUZZ_CHECK(cond) aborts with a message when an invariant of the code under test does not hold:
// libFuzzer then saves the input as a crash, and the replay tests fail on it.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace niels::fuzz {

// Reads the fuzz input front to back; past the end every read yields zeros.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return static_cast<uint32_t>(U16()) | (static_cast<uint32_t>(U16()) << 16); }
  // Up to `n` bytes (fewer at the end of the input).
  std::string_view Bytes(size_t n) {
    n = n < remaining() ? n : remaining();
    std::string_view out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  std::string_view Rest() { return Bytes(remaining()); }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A deterministic xorshift64* generator (split points and the like, seeded from the input).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  // Uniform-ish in [lo, hi].
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Next() % (hi - lo + 1); }

 private:
  uint64_t state_;
};

// The deepest nesting of brackets outside strings in `text` up to its first NUL byte: its nesting
// of arrays and objects when it is JSON, counted independently of any JSON parser. A NUL outside
// a string ends the text as nlohmann's lexer ends it (common/bounded_json.h): nothing after it is
// parsed, so nothing after it was accepted.
inline int JsonBracketDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (c == '\0' && !in_string) break;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = deepest > depth + 1 ? deepest : depth + 1;
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace niels::fuzz
