#pragma once
// KvCache: the keys and values of one sequence, for every layer, covering positions 0..length()-1.
//
// Keys are stored after RoPE, in the cache's dtype: f32, or f16 (`--kv-dtype f16`: half the memory
// and half the bytes attention reads, values rounded to nearest even). Storage grows with the
// tokens actually cached (in chunks), never preallocated to T. A KvCache is a value owned by one
// session; it is not thread-safe and is only touched by the engine thread. Clone() makes an
// independent deep copy (for ForkSession). No libtorch: the kernels read and write the storage
// through View() (daemon/kernels/model_views.h).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/model_views.h"
#include "daemon/model/config.h"

namespace niels::daemon::model {

class KvCache {
 public:
  // Dimensions from `config`, dtype config.kv_dtype (f32 or f16).
  explicit KvCache(const ModelConfig& config);
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Number of positions cached.
  int64_t length() const { return length_; }
  kernels::Dtype dtype() const { return dtype_; }
  // Bytes of storage held (grows with length(), not with T).
  int64_t bytes() const;
  // Positions the storage holds without reallocating (0, or a multiple of 64 capped at T).
  int64_t capacity() const { return capacity_; }
  // Drops positions >= n (storage is kept for reuse). REQUIRES: 0 <= n <= length().
  // Clear() == Truncate(0) and frees storage.
  void Truncate(int64_t n);
  void Clear();
  // Independent deep copy of the cached positions (its capacity is length() rounded up to a chunk).
  KvCache Clone() const;

  // Keys (or values) of positions [0, upto) of `layer` as floats [H, upto, D] (a copy; for tests and
  // tools). REQUIRES: upto <= length().
  std::vector<float> KeysAsFloats(int64_t layer, int64_t upto) const;
  std::vector<float> ValuesAsFloats(int64_t layer, int64_t upto) const;

  // --- used by Transformer ---
  // Makes room for `n` more positions in every layer (may reallocate storage).
  void Reserve(int64_t n);
  // The storage as the kernels see it; the kernels write positions length().. and the caller then
  // calls Advance. Valid until the next Reserve, Truncate(0), Clear or move.
  kernels::KvView View();
  void Advance(int64_t n);

 private:
  struct Layer {
    std::unique_ptr<std::byte[]> keys;    // [H, capacity, D] elements of dtype_
    std::unique_ptr<std::byte[]> values;
  };
  KvCache(int64_t layers, int64_t context, int64_t heads, int64_t head_dim, kernels::Dtype dtype);
  int64_t ChunkedCapacity(int64_t positions) const;
  // Reallocates every layer to `capacity` positions, keeping positions [0, length_).
  void Resize(int64_t capacity);
  std::vector<float> AsFloats(const std::unique_ptr<std::byte[]>& storage, int64_t upto) const;

  int64_t context_;
  int64_t heads_;
  int64_t head_dim_;
  kernels::Dtype dtype_;
  int64_t length_ = 0;
  int64_t capacity_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace niels::daemon::model
