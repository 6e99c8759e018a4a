#include "daemon/model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::model {
namespace {

// Storage grows in whole chunks of positions: one reallocation (and copy) per kChunk tokens, and
// at most kChunk - 1 unused positions per layer, so memory follows the cached tokens, not T.
constexpr int64_t kChunk = 64;

}  // namespace

KvCache::KvCache(const ModelConfig& config)
    : KvCache(config.layers, config.context, config.heads, config.head_dim(), config.kv_dtype) {}

KvCache::KvCache(int64_t layers, int64_t context, int64_t heads, int64_t head_dim, kernels::Dtype dtype)
    : context_(context), heads_(heads), head_dim_(head_dim), dtype_(dtype), layers_(layers) {}

int64_t KvCache::bytes() const {
  return 2 * static_cast<int64_t>(layers_.size()) * heads_ * capacity_ * head_dim_ * kernels::DtypeSize(dtype_);
}

void KvCache::Truncate(int64_t n) {
  if (n < 0 || n > length_) {
    throw std::out_of_range("KvCache::Truncate(" + std::to_string(n) + ") with length " + std::to_string(length_));
  }
  length_ = n;
  if (n == 0) Clear();
}

void KvCache::Clear() {
  length_ = 0;
  capacity_ = 0;
  for (Layer& layer : layers_) layer = Layer{};
}

KvCache KvCache::Clone() const {
  KvCache copy(static_cast<int64_t>(layers_.size()), context_, heads_, head_dim_, dtype_);
  if (length_ == 0) return copy;
  copy.Resize(ChunkedCapacity(length_));  // copy.length_ is 0: nothing moves
  const int64_t row = head_dim_ * kernels::DtypeSize(dtype_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (int64_t h = 0; h < heads_; ++h) {
      std::memcpy(copy.layers_[l].keys.get() + h * copy.capacity_ * row, layers_[l].keys.get() + h * capacity_ * row,
                  length_ * row);
      std::memcpy(copy.layers_[l].values.get() + h * copy.capacity_ * row,
                  layers_[l].values.get() + h * capacity_ * row, length_ * row);
    }
  }
  copy.length_ = length_;
  return copy;
}

int64_t KvCache::ChunkedCapacity(int64_t positions) const {
  const int64_t rounded = (positions + kChunk - 1) / kChunk * kChunk;
  return std::max(positions, std::min(rounded, context_));
}

void KvCache::Resize(int64_t capacity) {
  const int64_t row = head_dim_ * kernels::DtypeSize(dtype_);
  for (Layer& layer : layers_) {
    Layer grown{std::unique_ptr<std::byte[]>(new std::byte[heads_ * capacity * row]),
                std::unique_ptr<std::byte[]>(new std::byte[heads_ * capacity * row])};
    for (int64_t h = 0; h < heads_ && length_ > 0; ++h) {  // [H, capacity, D]: head h moves
      std::memcpy(grown.keys.get() + h * capacity * row, layer.keys.get() + h * capacity_ * row, length_ * row);
      std::memcpy(grown.values.get() + h * capacity * row, layer.values.get() + h * capacity_ * row, length_ * row);
    }
    layer = std::move(grown);
  }
  capacity_ = capacity;
}

void KvCache::Reserve(int64_t n) {
  const int64_t needed = length_ + n;
  if (needed <= capacity_) return;
  Resize(ChunkedCapacity(needed));
}

kernels::KvView KvCache::View() {
  kernels::KvView view;
  view.capacity = capacity_;
  view.dtype = dtype_;
  for (Layer& layer : layers_) {
    view.keys.push_back(layer.keys.get());
    view.values.push_back(layer.values.get());
  }
  return view;
}

void KvCache::Advance(int64_t n) {
  if (length_ + n > capacity_) throw std::out_of_range("KvCache::Advance past capacity");
  length_ += n;
}

std::vector<float> KvCache::AsFloats(const std::unique_ptr<std::byte[]>& storage, int64_t upto) const {
  if (upto < 0 || upto > length_) throw std::out_of_range("KvCache: positions past length()");
  std::vector<float> out(static_cast<size_t>(heads_ * upto * head_dim_));
  const int64_t row = head_dim_ * kernels::DtypeSize(dtype_);
  for (int64_t h = 0; h < heads_ && upto > 0; ++h) {
    kernels::simd::ToFloat(storage.get() + h * capacity_ * row, dtype_, upto * head_dim_,
                           out.data() + h * upto * head_dim_);
  }
  return out;
}

std::vector<float> KvCache::KeysAsFloats(int64_t layer, int64_t upto) const { return AsFloats(layers_.at(layer).keys, upto); }

std::vector<float> KvCache::ValuesAsFloats(int64_t layer, int64_t upto) const {
  return AsFloats(layers_.at(layer).values, upto);
}

}  // namespace niels::daemon::model
