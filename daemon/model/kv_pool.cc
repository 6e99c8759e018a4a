#include "daemon/model/kv_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>

namespace niels::daemon::model {
namespace {

size_t PageSize() {
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

}  // namespace

size_t KvPool::IndexKeyHash::operator()(const IndexKey& k) const {
  // FNV-1a over the parent key and the token ids.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (v >> (8 * byte)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(k.parent);
  for (int32_t t : k.tokens) mix(static_cast<uint32_t>(t));
  return static_cast<size_t>(h);
}

namespace {

size_t StrideBytes(int64_t block_elements, kernels::Dtype dtype) {
  const size_t page = PageSize();
  return (static_cast<size_t>(block_elements * kernels::DtypeSize(dtype)) + page - 1) / page * page;
}

int64_t BlockElements(const ModelConfig& c) {
  return c.layers * 2 * c.kv_head_count() * KvPool::kBlockTokens * c.head_dim();
}

kernels::Dtype CheckedDtype(kernels::Dtype dtype) {
  if (dtype != kernels::Dtype::kF32 && dtype != kernels::Dtype::kF16) {
    throw std::invalid_argument("KvPool: KV blocks are f32 or f16, not " + std::string(kernels::DtypeName(dtype)));
  }
  return dtype;
}

}  // namespace

uint64_t KvPool::BytesForOneSequence(const ModelConfig& config, kernels::Dtype dtype) {
  const uint64_t blocks = static_cast<uint64_t>((config.context + kBlockTokens - 1) / kBlockTokens);
  return blocks * StrideBytes(BlockElements(config), CheckedDtype(dtype));
}

KvPool::KvPool(const ModelConfig& config, uint64_t budget_bytes, kernels::Dtype dtype)
    : layers_(config.layers),
      heads_(config.kv_head_count()),
      head_dim_(config.head_dim()),
      block_elements_(BlockElements(config)),
      context_(config.context),
      budget_bytes_(budget_bytes),
      dtype_(CheckedDtype(dtype)) {
  const size_t stride_bytes = StrideBytes(block_elements_, dtype_);
  stride_bytes_ = stride_bytes;
  capacity_ = static_cast<int32_t>(std::min<uint64_t>(budget_bytes / stride_bytes, INT32_MAX / 2));
  blocks_.resize(static_cast<size_t>(capacity_));
  if (capacity_ > 0) {
    mapped_bytes_ = stride_bytes * static_cast<size_t>(capacity_);
    void* memory = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<unsigned char*>(memory);
  }
  free_.reserve(static_cast<size_t>(capacity_));
  for (BlockId id = capacity_ - 1; id >= 0; --id) free_.push_back(id);  // lowest ids first
}

KvPool::~KvPool() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
}

KvPool::IndexKey KvPool::MakeKey(uint64_t parent, std::span<const int32_t> tokens) {
  if (tokens.size() != static_cast<size_t>(kBlockTokens)) {
    throw std::invalid_argument("KvPool: a block key needs exactly " + std::to_string(kBlockTokens) + " tokens");
  }
  IndexKey key{parent, {}};
  std::copy(tokens.begin(), tokens.end(), key.tokens.begin());
  return key;
}

BlockId KvPool::Allocate() {
  while (true) {
    if (!free_.empty()) {
      const BlockId id = free_.back();
      free_.pop_back();
      blocks_[id].refs = 1;
      ++used_;
      return id;
    }
    if (!cached_.empty()) {
      Evict(cached_.front());
      continue;
    }
    if (!reclaim_ || !reclaim_()) return kNoBlock;
  }
}

void KvPool::Ref(BlockId id) {
  Block& block = blocks_[id];
  if (block.refs == 0) {  // a cached block comes back into use
    cached_.erase(block.cached_at);
    ++used_;
  } else if (block.refs == 1) {
    ++shared_;
  }
  ++block.refs;
}

void KvPool::Unref(BlockId id) {
  Block& block = blocks_[id];
  if (block.refs <= 0) throw std::logic_error("KvPool::Unref of an unreferenced block");
  if (--block.refs == 1) --shared_;
  if (block.refs > 0) return;
  --used_;
  if (block.key != 0) {
    block.cached_at = cached_.insert(cached_.end(), id);
  } else {
    Release(id);
  }
}

void KvPool::Evict(BlockId id) {
  Block& block = blocks_[id];
  cached_.erase(block.cached_at);
  index_.erase(block.index_key);
  block.key = 0;
  ++evictions_;
  Release(id);
}

void KvPool::Release(BlockId id) {
  ::madvise(data(id), stride_bytes_, MADV_DONTNEED);  // the pages go back; the block reads as zeros
  free_.push_back(id);
}

BlockId KvPool::Find(uint64_t parent_key, std::span<const int32_t> tokens) {
  lookup_tokens_ += tokens.size();
  auto it = index_.find(MakeKey(parent_key, tokens));
  if (it == index_.end()) return kNoBlock;
  Ref(it->second);
  return it->second;
}

uint64_t KvPool::Register(BlockId id, uint64_t parent_key, std::span<const int32_t> tokens) {
  IndexKey index_key = MakeKey(parent_key, tokens);
  auto [it, inserted] = index_.try_emplace(index_key, id);
  if (!inserted) return blocks_[it->second].key;
  Block& block = blocks_[id];
  block.key = next_key_++;
  block.index_key = std::move(index_key);
  return block.key;
}

}  // namespace niels::daemon::model
