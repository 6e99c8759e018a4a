#pragma once
// KvCache: the keys and values of one sequence, for every layer, covering positions 0..length()-1,
// held as a table of blocks of a KvPool (kv_pool.h; docs/ARCHITECTURE.md, "Sessions and the KV
// cache"). Keys are stored after RoPE. The cache also remembers the token ids it holds, so that
// full blocks can be registered in the pool's prefix index and found again by other sequences.
//
// Sharing: Share() makes a second cache over the same blocks (a fork or a snapshot costs no KV
// copy); AttachPrefix() starts an empty cache from registered blocks of any sequence of the same
// prefix scope (KvPool::ScopeRoot) with the same leading tokens. A block that is shared or
// registered is never written: PrepareWrite copies it first (copy on write), so at most one block
// is copied per fork.
//
// Memory follows the cached tokens in whole blocks (KvPool::kBlockTokens positions), never T.
// Not thread-safe: one thread (the engine thread) uses a cache and its pool. No libtorch.

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "daemon/model/config.h"
#include "daemon/model/kv_pool.h"

namespace niels::daemon::model {

class KvCache {
 public:
  // An empty cache on `pool` whose prefix chains start at `prefix_root` (KvPool::kRootKey, or
  // KvPool::ScopeRoot of its scope): it finds and registers blocks in that scope only.
  // REQUIRES: pool not null.
  explicit KvCache(std::shared_ptr<KvPool> pool, uint64_t prefix_root = KvPool::kRootKey);
  // An empty cache with a pool of its own, of `dtype` blocks, that holds four sequences of T
  // positions (for tools, tests and benchmarks: a sequence and a few Share()d copies of it; nielsd's
  // sessions share the engine's pool).
  explicit KvCache(const ModelConfig& config, kernels::Dtype dtype = kernels::Dtype::kF32);
  ~KvCache();  // releases its blocks
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Number of positions cached, and the token ids at those positions.
  int64_t length() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Blocks held (each counted once here even if other caches share it), and their bytes.
  int64_t blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t bytes() const { return blocks() * static_cast<int64_t>(pool_->block_bytes()); }
  // Blocks only this cache holds, and blocks it shares with other caches (shared + own = blocks()).
  int64_t shared_blocks() const;
  int64_t own_blocks() const { return blocks() - shared_blocks(); }
  KvPool& pool() const { return *pool_; }
  const std::shared_ptr<KvPool>& shared_pool() const { return pool_; }

  // Drops positions >= n (blocks wholly past n go back to the pool). REQUIRES: 0 <= n <= length().
  void Truncate(int64_t n);
  // Drops every position.
  void Clear();
  // A cache over the same blocks (each gains a reference): same length, tokens, contents and scope.
  KvCache Share() const;
  // For an empty cache: takes the longest run of registered full blocks whose tokens are the start
  // of `tokens` (whole blocks only), keeps at most `max_positions` of their positions, and returns
  // the number of positions now cached; the pool counts those as prefix hits. A caller that needs
  // the last token's logits passes tokens.size() - 1: a last block that is found is still taken,
  // only its last position is dropped, to be recomputed. No-op (0) when the cache is not empty.
  int64_t AttachPrefix(std::span<const int32_t> tokens,
                       int64_t max_positions = std::numeric_limits<int64_t>::max());
  // For a cache of any length whose tokens are where `tokens` starts: when the pool holds a longer
  // run of registered full blocks for `tokens` than the cache's length (another session of the same
  // scope left them, e.g. the previous request of a conversation re-sent whole), drops what the
  // cache holds past its leading registered blocks and attaches the rest of that run as
  // AttachPrefix does; otherwise changes nothing. Returns the number of positions now cached. The
  // positions it gives up are the same tokens at the same positions, so the run's contents are what
  // the cache would have computed. Costs one index lookup per block past the registered ones.
  int64_t ExtendFromPrefix(std::span<const int32_t> tokens,
                           int64_t max_positions = std::numeric_limits<int64_t>::max());

  // --- for the forward pass (Transformer) ---
  // Makes positions [length(), length() + n) writable: allocates blocks and copies a last block
  // that is shared or registered. Returns false (nothing changed that matters: the cache still
  // holds the same positions) when the pool cannot supply a block.
  bool PrepareWrite(int64_t n);
  // The block table: block i holds positions [i * kBlockTokens, (i + 1) * kBlockTokens).
  const std::vector<BlockId>& block_ids() const { return blocks_; }
  // Records that positions [length(), length() + tokens.size()) were written for `tokens`, and
  // registers the blocks that became full in the pool's prefix index. REQUIRES: PrepareWrite for at
  // least tokens.size() positions, every layer of every position written.
  void Commit(std::span<const int32_t> tokens);

  // Copies of positions [0, upto) of `layer` widened to floats [H, upto, D] (for tests and tools).
  // REQUIRES: upto <= length().
  std::vector<float> KeysAsFloats(int64_t layer, int64_t upto) const;
  std::vector<float> ValuesAsFloats(int64_t layer, int64_t upto) const;

 private:
  std::vector<float> Gather(int64_t layer, int kv, int64_t upto) const;
  void ReleaseBlocksFrom(size_t first);

  std::shared_ptr<KvPool> pool_;
  uint64_t prefix_root_ = KvPool::kRootKey;
  std::vector<BlockId> blocks_;
  // Per block: the prefix-index key this cache knows it under (0 until the block is full and
  // registered by Commit, or attached).
  std::vector<uint64_t> keys_;
  std::vector<int32_t> tokens_;
};

}  // namespace niels::daemon::model
