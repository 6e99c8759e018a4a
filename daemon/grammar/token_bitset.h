#pragma once
// TokenBitset: one bit per token id of a vocabulary (bit set = the token is allowed). A value
// type; 151,936 tokens take 19 KB.

#include <cstdint>
#include <vector>

namespace niels::daemon::grammar {

class TokenBitset {
 public:
  TokenBitset() = default;
  explicit TokenBitset(int32_t size) { Reset(size); }

  // Resizes to `size` bits, all clear.
  void Reset(int32_t size) {
    size_ = size;
    words_.assign((static_cast<size_t>(size) + 63) / 64, 0);
  }
  void Set(int32_t id) { words_[id >> 6] |= uint64_t{1} << (id & 63); }
  void Clear(int32_t id) { words_[id >> 6] &= ~(uint64_t{1} << (id & 63)); }
  bool Test(int32_t id) const { return (words_[id >> 6] >> (id & 63)) & 1; }
  int32_t size() const { return size_; }
  int32_t Count() const {
    int32_t n = 0;
    for (uint64_t w : words_) n += __builtin_popcountll(w);
    return n;
  }
  const std::vector<uint64_t>& words() const { return words_; }
  std::vector<uint64_t>& mutable_words() { return words_; }
  bool operator==(const TokenBitset&) const = default;

 private:
  int32_t size_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace niels::daemon::grammar
