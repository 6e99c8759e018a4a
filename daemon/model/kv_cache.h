#pragma once
// KvCache: the keys and values of one sequence, for every layer, covering positions 0..length()-1.
//
// Keys are stored after RoPE. Storage grows with the tokens actually cached (in chunks), never
// preallocated to T. A KvCache is a value owned by one session; it is not thread-safe and is only
// touched by the engine thread. Clone() makes an independent deep copy (for ForkSession).

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "daemon/model/config.h"

namespace niels::daemon::model {

class KvCache {
 public:
  explicit KvCache(const ModelConfig& config);
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Number of positions cached.
  int64_t length() const { return length_; }
  // Bytes of storage held (grows with length(), not with T).
  int64_t bytes() const;
  // Positions the storage holds without reallocating (0, or a multiple of 64 capped at T).
  int64_t capacity() const;
  // Drops positions >= n (storage is kept for reuse). REQUIRES: 0 <= n <= length().
  // Clear() == Truncate(0) and frees storage.
  void Truncate(int64_t n);
  void Clear();
  // Independent deep copy of the cached positions (its capacity is length() rounded up to a chunk).
  KvCache Clone() const;

  // --- used by Transformer ---
  // Makes room for `n` more positions in every layer (may reallocate storage).
  void Reserve(int64_t n);
  // Writes k, v ([H, n, D]) of `layer` at positions length()..length()+n-1. Call for every layer,
  // then Advance(n) once.
  void Write(int64_t layer, const torch::Tensor& k, const torch::Tensor& v);
  void Advance(int64_t n);
  // Views of positions [0, upto) of `layer`: [H, upto, D].
  torch::Tensor Keys(int64_t layer, int64_t upto) const;
  torch::Tensor Values(int64_t layer, int64_t upto) const;
  // The storage of `layer` as raw floats [H, capacity(), D] (for DecodeStep). Valid until the next
  // Reserve, Truncate(0) or Clear. REQUIRES: capacity() > 0.
  float* KeyStorage(int64_t layer) { return k_[layer].data_ptr<float>(); }
  float* ValueStorage(int64_t layer) { return v_[layer].data_ptr<float>(); }

 private:
  KvCache(int64_t layers, int64_t context, int64_t heads, int64_t head_dim, int64_t capacity);
  int64_t ChunkedCapacity(int64_t positions) const;

  int64_t context_;
  int64_t heads_;
  int64_t head_dim_;
  int64_t length_ = 0;
  std::vector<torch::Tensor> k_;  // per layer: [H, capacity, D]
  std::vector<torch::Tensor> v_;  // per layer: [H, capacity, D]
};

}  // namespace niels::daemon::model
