#include "daemon/model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::model {
namespace {

constexpr int64_t kBlockTokens = KvPool::kBlockTokens;

int64_t BlocksFor(int64_t positions) { return (positions + kBlockTokens - 1) / kBlockTokens; }

}  // namespace

KvCache::KvCache(std::shared_ptr<KvPool> pool, uint64_t prefix_root)
    : pool_(std::move(pool)), prefix_root_(prefix_root) {
  if (!pool_) throw std::invalid_argument("KvCache needs a pool");
}

KvCache::KvCache(const ModelConfig& config, kernels::Dtype dtype)
    : KvCache(std::make_shared<KvPool>(config, 4 * KvPool::BytesForOneSequence(config, dtype), dtype)) {}

KvCache::~KvCache() {
  if (pool_) ReleaseBlocksFrom(0);
}

KvCache::KvCache(KvCache&& other) noexcept
    : pool_(other.pool_),  // the moved-from cache keeps the pool and scope, with no blocks
      prefix_root_(other.prefix_root_),
      blocks_(std::move(other.blocks_)),
      keys_(std::move(other.keys_)),
      tokens_(std::move(other.tokens_)) {
  other.blocks_.clear();
  other.keys_.clear();
  other.tokens_.clear();
}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
  if (this == &other) return *this;
  ReleaseBlocksFrom(0);
  pool_ = other.pool_;
  prefix_root_ = other.prefix_root_;
  blocks_ = std::move(other.blocks_);
  keys_ = std::move(other.keys_);
  tokens_ = std::move(other.tokens_);
  other.blocks_.clear();
  other.keys_.clear();
  other.tokens_.clear();
  return *this;
}

int64_t KvCache::shared_blocks() const {
  int64_t shared = 0;
  for (BlockId id : blocks_) shared += pool_->refs(id) > 1 ? 1 : 0;
  return shared;
}

void KvCache::ReleaseBlocksFrom(size_t first) {
  // Last block first: an unreferenced chain enters the pool's cache leaves first, so eviction takes
  // the ends of prefixes before their beginnings.
  while (blocks_.size() > first) {
    pool_->Unref(blocks_.back());
    blocks_.pop_back();
    keys_.pop_back();
  }
}

void KvCache::Truncate(int64_t n) {
  if (n < 0 || n > length()) {
    throw std::out_of_range("KvCache::Truncate(" + std::to_string(n) + ") with length " + std::to_string(length()));
  }
  tokens_.resize(static_cast<size_t>(n));
  ReleaseBlocksFrom(static_cast<size_t>(BlocksFor(n)));
  // A block cut short is no longer known to this cache as full (it may still be registered in the
  // pool for other caches; PrepareWrite copies it before writing).
  if (n % kBlockTokens != 0) keys_.back() = 0;
}

void KvCache::Clear() { Truncate(0); }

KvCache KvCache::Share() const {
  KvCache copy(pool_, prefix_root_);
  copy.blocks_ = blocks_;
  copy.keys_ = keys_;
  copy.tokens_ = tokens_;
  copy.ReleaseBlocksFrom(static_cast<size_t>(BlocksFor(length())));  // never share blocks past length
  for (BlockId id : copy.blocks_) pool_->Ref(id);
  return copy;
}

int64_t KvCache::AttachPrefix(std::span<const int32_t> tokens, int64_t max_positions) {
  if (!tokens_.empty() || !blocks_.empty()) return 0;
  return ExtendFromPrefix(tokens, max_positions);
}

int64_t KvCache::ExtendFromPrefix(std::span<const int32_t> tokens, int64_t max_positions) {
  if (tokens_.size() > tokens.size() || !std::equal(tokens_.begin(), tokens_.end(), tokens.begin())) {
    return length();
  }
  // The chain continues after the leading blocks this cache already holds registered (their keys
  // are set in order, Commit); each further block Find returns gains a reference.
  size_t known = 0;
  while (known < keys_.size() && keys_[known] != 0) ++known;
  uint64_t parent = known == 0 ? prefix_root_ : keys_[known - 1];
  std::vector<BlockId> found;
  std::vector<uint64_t> found_keys;
  for (size_t begin = known * kBlockTokens; begin + kBlockTokens <= tokens.size(); begin += kBlockTokens) {
    const BlockId id = pool_->Find(parent, tokens.subspan(begin, kBlockTokens));
    if (id == kNoBlock) break;
    parent = pool_->key(id);
    found.push_back(id);
    found_keys.push_back(parent);
  }
  const int64_t reach =
      std::min(static_cast<int64_t>(known + found.size()) * kBlockTokens, max_positions);
  if (reach <= length()) {
    for (BlockId id : found) pool_->Unref(id);
    return length();
  }
  ReleaseBlocksFrom(known);
  blocks_.insert(blocks_.end(), found.begin(), found.end());
  keys_.insert(keys_.end(), found_keys.begin(), found_keys.end());
  tokens_.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(blocks_.size()) * kBlockTokens);
  if (length() > max_positions) Truncate(max_positions < 0 ? 0 : max_positions);
  pool_->CountPrefixHit(length());
  return length();
}

bool KvCache::PrepareWrite(int64_t n) {
  const size_t had = blocks_.size();
  const int64_t start = length();
  // Copy on write: the block that position `start` falls into, if the cache has it already.
  const size_t last = static_cast<size_t>(start / kBlockTokens);
  if (last < had && (pool_->refs(blocks_[last]) > 1 || pool_->registered(blocks_[last]))) {
    const BlockId old = blocks_[last];
    const BlockId copy = pool_->Allocate();
    if (copy == kNoBlock) return false;
    std::memcpy(pool_->data(copy), pool_->data(old), pool_->block_bytes());
    blocks_[last] = copy;
    keys_[last] = 0;
    pool_->Unref(old);
  }
  const size_t needed = static_cast<size_t>(BlocksFor(start + n));
  while (blocks_.size() < needed) {
    const BlockId id = pool_->Allocate();
    if (id == kNoBlock) {
      ReleaseBlocksFrom(std::max(had, static_cast<size_t>(BlocksFor(start))));
      return false;
    }
    blocks_.push_back(id);
    keys_.push_back(0);
  }
  return true;
}

void KvCache::Commit(std::span<const int32_t> tokens) {
  const int64_t start = length();
  if (BlocksFor(start + static_cast<int64_t>(tokens.size())) > blocks()) {
    throw std::logic_error("KvCache::Commit past the blocks PrepareWrite made");
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  // Register the blocks that are now full, in order (each under the key of the one before).
  for (int64_t block = start / kBlockTokens; (block + 1) * kBlockTokens <= length(); ++block) {
    if (keys_[block] != 0) continue;
    const uint64_t parent = block == 0 ? prefix_root_ : keys_[block - 1];
    if (block > 0 && parent == 0) break;  // an unregistered predecessor: nothing to chain to
    keys_[block] = pool_->Register(blocks_[block], parent,
                                   std::span<const int32_t>(tokens_).subspan(block * kBlockTokens, kBlockTokens));
  }
}

std::vector<float> KvCache::Gather(int64_t layer, int kv, int64_t upto) const {
  const int64_t H = pool_->heads(), D = pool_->head_dim();
  std::vector<float> out(static_cast<size_t>(H * upto * D));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t p = 0; p < upto; ++p) {
      kernels::simd::ToFloat(pool_->Row(blocks_[p / kBlockTokens], layer, kv, h, p % kBlockTokens), pool_->dtype(), D,
                             out.data() + (h * upto + p) * D);
    }
  }
  return out;
}

std::vector<float> KvCache::KeysAsFloats(int64_t layer, int64_t upto) const { return Gather(layer, 0, upto); }

std::vector<float> KvCache::ValuesAsFloats(int64_t layer, int64_t upto) const { return Gather(layer, 1, upto); }

}  // namespace niels::daemon::model
