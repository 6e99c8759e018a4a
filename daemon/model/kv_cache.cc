#include "daemon/model/kv_cache.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

namespace niels::daemon::model {
namespace {

// Storage grows in whole chunks of positions: one reallocation (and copy) per kChunk tokens, and
// at most kChunk - 1 unused positions per layer, so memory follows the cached tokens, not T.
constexpr int64_t kChunk = 64;

// [H, capacity, D] f32, uninitialised (every position is written before it is read).
torch::Tensor NewStorage(int64_t heads, int64_t capacity, int64_t head_dim) {
  return at::empty({heads, capacity, head_dim}, at::TensorOptions().dtype(at::kFloat));
}

}  // namespace

KvCache::KvCache(const ModelConfig& config)
    : context_(config.context),
      heads_(config.heads), head_dim_(config.head_dim()), k_(config.layers), v_(config.layers) {}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < k_.size(); ++i) {
    if (k_[i].defined()) total += k_[i].nbytes() + v_[i].nbytes();
  }
  return total;
}

int64_t KvCache::capacity() const { return k_.empty() || !k_[0].defined() ? 0 : k_[0].size(1); }

void KvCache::Truncate(int64_t n) {
  TORCH_CHECK(n >= 0 && n <= length_, "KvCache::Truncate(", n, ") with length ", length_);
  length_ = n;
  if (n == 0) Clear();
}

void KvCache::Clear() {
  length_ = 0;
  for (size_t i = 0; i < k_.size(); ++i) {
    k_[i] = torch::Tensor();
    v_[i] = torch::Tensor();
  }
}

KvCache KvCache::Clone() const {
  c10::InferenceMode guard;
  KvCache copy(static_cast<int64_t>(k_.size()), context_, heads_, head_dim_, ChunkedCapacity(length_));
  for (size_t i = 0; i < k_.size() && length_ > 0; ++i) {
    copy.k_[i].narrow(1, 0, length_).copy_(Keys(static_cast<int64_t>(i), length_));
    copy.v_[i].narrow(1, 0, length_).copy_(Values(static_cast<int64_t>(i), length_));
  }
  copy.length_ = length_;
  return copy;
}

KvCache::KvCache(int64_t layers, int64_t context, int64_t heads, int64_t head_dim, int64_t capacity)
    : context_(context),
      heads_(heads), head_dim_(head_dim), k_(layers), v_(layers) {
  if (capacity == 0) return;
  for (size_t i = 0; i < k_.size(); ++i) {
    k_[i] = NewStorage(heads_, capacity, head_dim_);
    v_[i] = NewStorage(heads_, capacity, head_dim_);
  }
}

int64_t KvCache::ChunkedCapacity(int64_t positions) const {
  const int64_t rounded = (positions + kChunk - 1) / kChunk * kChunk;
  return std::max(positions, std::min(rounded, context_));
}

void KvCache::Reserve(int64_t n) {
  const int64_t needed = length_ + n;
  if (needed <= capacity()) return;
  c10::InferenceMode guard;
  const int64_t new_capacity = ChunkedCapacity(needed);
  for (size_t i = 0; i < k_.size(); ++i) {
    torch::Tensor k = NewStorage(heads_, new_capacity, head_dim_);
    torch::Tensor v = NewStorage(heads_, new_capacity, head_dim_);
    if (length_ > 0) {
      k.narrow(1, 0, length_).copy_(k_[i].narrow(1, 0, length_));
      v.narrow(1, 0, length_).copy_(v_[i].narrow(1, 0, length_));
    }
    k_[i] = std::move(k);
    v_[i] = std::move(v);
  }
}

void KvCache::Write(int64_t layer, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t n = k.size(1);  // k, v: [H, n, D]
  TORCH_CHECK(length_ + n <= capacity(), "KvCache::Write past capacity: Reserve first");
  k_[layer].narrow(1, length_, n).copy_(k);
  v_[layer].narrow(1, length_, n).copy_(v);
}

void KvCache::Advance(int64_t n) {
  TORCH_CHECK(length_ + n <= capacity(), "KvCache::Advance past capacity");
  length_ += n;
}

torch::Tensor KvCache::Keys(int64_t layer, int64_t upto) const { return k_[layer].narrow(1, 0, upto); }

torch::Tensor KvCache::Values(int64_t layer, int64_t upto) const { return v_[layer].narrow(1, 0, upto); }

}  // namespace niels::daemon::model
