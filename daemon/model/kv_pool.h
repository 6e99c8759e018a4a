#pragma once
// KvPool: the KV memory of every sequence as fixed-size blocks, with an index that lets sequences
// whose tokens start alike share blocks (docs/ARCHITECTURE.md, "Sessions and the KV cache"; the
// idea is vLLM's PagedAttention with SGLang-style automatic prefix reuse).
//
// A block holds the keys and values of kBlockTokens consecutive positions of one sequence for every
// layer, as elements of the pool's dtype (f32, or f16 for nielsd --kv-dtype f16: half the bytes)
// laid out [L][2 (keys, values)][KV][kBlockTokens][D] (BlockOffset; KV key/value heads). Writers narrow with
// kernels::simd::FromFloat, readers widen through a kernels::Matrix of dtype(). Each KvCache
// (kv_cache.h) owns a table of block ids; blocks are reference counted, so a fork or a shared prefix
// costs no copy.
//
// Prefix index: a block that is full (all kBlockTokens positions written) can be registered under
// the key of the block before it and its kBlockTokens token ids; Find() walks that chain from a
// root. A key is a serial number never reused, so a chain through an evicted block cannot match
// anything. Registered blocks are immutable (a KvCache copies one before writing into it).
// Chains start at a scope's root (ScopeRoot; nielsd scopes by the session's owner), so a
// sequence only ever finds blocks that sequences of its own scope registered.
//
// Memory: the pool is sized once, budget_bytes / block stride blocks, reserved with mmap and
// committed page by page as blocks are first written; a block that becomes free gives its pages back
// (MADV_DONTNEED). A block no cache references stays cached while it is registered (a later sequence
// may reuse it) and is evicted, least recently released first, when a block is needed and none is
// free; then the reclaimer (SetReclaimer) is asked to drop references (idle sessions' caches).
//
// No libtorch. Not thread-safe: one thread (the engine thread) uses a pool and all its caches.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "daemon/kernels/dtype.h"
#include "daemon/model/config.h"

namespace niels::daemon::model {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

class KvPool {
 public:
  static constexpr int64_t kBlockTokens = 16;
  // The key of the (empty) prefix before a sequence's first block, for a sequence of no scope (tools,
  // tests and benchmarks with a pool of their own).
  static constexpr uint64_t kRootKey = 0;
  // The key of the (empty) prefix before the first block of a sequence in scope `scope`: chains of
  // different scopes never meet. nielsd passes the session's owner (a uid or an API-key principal,
  // common/owner.h, both below 2^63), so one user's prompt is never served from (and its time to
  // first token never reveals) blocks another user's prompt left.
  // Block keys are serial numbers far below 2^63, so no root equals a block's key.
  static constexpr uint64_t ScopeRoot(uint64_t scope) { return (uint64_t{1} << 63) | scope; }

  // floor(budget_bytes / block stride) blocks of `config`'s shape (possibly none) holding `dtype`
  // elements; the stride is a block's bytes rounded up to whole pages. REQUIRES: dtype f32 or f16
  // (std::invalid_argument otherwise).
  KvPool(const ModelConfig& config, uint64_t budget_bytes, kernels::Dtype dtype = kernels::Dtype::kF32);
  // The budget that gives a pool of exactly enough blocks for one sequence of T positions.
  static uint64_t BytesForOneSequence(const ModelConfig& config, kernels::Dtype dtype = kernels::Dtype::kF32);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int64_t layers() const { return layers_; }
  // T: the longest sequence a cache of this pool holds.
  int64_t context() const { return context_; }
  // The budget the pool was sized for (its capacity is budget_bytes / block stride blocks).
  uint64_t budget_bytes() const { return budget_bytes_; }
  int64_t heads() const { return heads_; }
  int64_t head_dim() const { return head_dim_; }
  // The element type of every block (f32 or f16).
  kernels::Dtype dtype() const { return dtype_; }
  // Elements of one block, and the bytes of KV memory one block stands for.
  int64_t block_elements() const { return block_elements_; }
  uint64_t block_bytes() const { return static_cast<uint64_t>(block_elements_ * kernels::DtypeSize(dtype_)); }
  // Element offset in a block of (layer, keys (0) or values (1), head, slot): D elements follow.
  int64_t BlockOffset(int64_t layer, int kv, int64_t head, int64_t slot) const {
    return (((layer * 2 + kv) * heads_ + head) * kBlockTokens + slot) * head_dim_;
  }

  int32_t capacity() const { return capacity_; }
  int32_t used() const { return used_; }      // referenced by at least one cache
  int32_t shared() const { return shared_; }  // referenced by two or more
  int32_t cached() const { return static_cast<int32_t>(cached_.size()); }  // kept for reuse only
  int32_t free_blocks() const { return capacity_ - used_ - cached(); }
  // Blocks a new allocation could get without the reclaimer: free + cached.
  int32_t available() const { return capacity_ - used_; }

  // Prefix reuse counters: tokens looked up through Find, and positions that caches kept of the
  // blocks Find returned (KvCache::AttachPrefix reports them: a position found but then recomputed
  // for its logits is not a hit).
  uint64_t lookup_tokens() const { return lookup_tokens_; }
  uint64_t hit_tokens() const { return hit_tokens_; }
  void CountPrefixHit(int64_t positions) { hit_tokens_ += static_cast<uint64_t>(positions); }
  uint64_t evictions() const { return evictions_; }

  // The first byte of block `id` (block_bytes() bytes of dtype() elements).
  void* data(BlockId id) const { return base_ + static_cast<size_t>(id) * stride_bytes_; }
  // The D elements of (layer, kv, head, slot) in block `id`.
  void* Row(BlockId id, int64_t layer, int kv, int64_t head, int64_t slot) const {
    return base_ + static_cast<size_t>(id) * stride_bytes_ +
           BlockOffset(layer, kv, head, slot) * kernels::DtypeSize(dtype_);
  }

  // A block with one reference, unregistered, its contents undefined: a free one, else the least
  // recently released cached one (evicted from the index), else one the reclaimer released;
  // kNoBlock when none can be had.
  BlockId Allocate();
  void Ref(BlockId id);
  // Drops one reference. An unreferenced registered block stays cached; an unregistered one is freed.
  void Unref(BlockId id);
  int32_t refs(BlockId id) const { return blocks_[id].refs; }
  bool registered(BlockId id) const { return blocks_[id].key != 0; }
  uint64_t key(BlockId id) const { return blocks_[id].key; }

  // The registered block holding `tokens` (kBlockTokens ids) right after the prefix `parent_key`,
  // with a reference taken for the caller; kNoBlock when there is none. Counts the lookup.
  BlockId Find(uint64_t parent_key, std::span<const int32_t> tokens);
  // Registers the full block `id` as holding `tokens` after `parent_key` and returns the key its
  // successors register under. When an equal block is registered already, `id` stays unregistered
  // and that block's key is returned (the contents are the same, so the chain continues).
  // REQUIRES: every position of the block written, parent_key a key returned before (or a root).
  uint64_t Register(BlockId id, uint64_t parent_key, std::span<const int32_t> tokens);

  // Called by Allocate when no block is free or cached: drop some references (returns false when
  // it could drop none). Set by the owner of the caches (sessions::KvBudget in nielsd).
  void SetReclaimer(std::function<bool()> reclaim) { reclaim_ = std::move(reclaim); }

 private:
  struct IndexKey {
    uint64_t parent;
    std::array<int32_t, kBlockTokens> tokens;
    bool operator==(const IndexKey&) const = default;
  };
  struct IndexKeyHash {
    size_t operator()(const IndexKey& k) const;
  };
  struct Block {
    int32_t refs = 0;
    uint64_t key = 0;  // 0: not registered
    IndexKey index_key{};
    std::list<BlockId>::iterator cached_at;  // valid while cached
  };

  static IndexKey MakeKey(uint64_t parent, std::span<const int32_t> tokens);
  // Removes a cached block from the index and the cache list (it becomes free).
  void Evict(BlockId id);
  void Release(BlockId id);  // gives the block's pages back and puts it on the free list

  int64_t layers_, heads_, head_dim_, block_elements_, context_;
  uint64_t budget_bytes_;
  kernels::Dtype dtype_;
  size_t stride_bytes_ = 0;  // block stride, a whole number of pages
  int32_t capacity_ = 0;
  unsigned char* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;
  std::list<BlockId> cached_;  // unreferenced registered blocks, least recently released first
  std::unordered_map<IndexKey, BlockId, IndexKeyHash> index_;
  uint64_t next_key_ = 1;
  int32_t used_ = 0;
  int32_t shared_ = 0;
  uint64_t lookup_tokens_ = 0;
  uint64_t hit_tokens_ = 0;
  uint64_t evictions_ = 0;
  std::function<bool()> reclaim_;
};

}  // namespace niels::daemon::model
