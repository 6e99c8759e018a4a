// KvCache and KvPool: block tables, copy on write, prefix sharing, eviction (kv_cache.h, kv_pool.h).
#include "daemon/model/kv_cache.h"

#include <memory>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

namespace niels::daemon::model {
namespace {

constexpr int64_t kBt = KvPool::kBlockTokens;

ModelConfig CacheConfig(int64_t context = 512) {
  ModelConfig config;
  config.vocab_size = 50;
  config.context = context;
  config.width = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 24;
  return config;
}

std::shared_ptr<KvPool> PoolOf(const ModelConfig& config, int64_t blocks) {
  // Page-rounded stride: ask for exactly `blocks` strides.
  const uint64_t stride = KvPool::BytesForOneSequence(config) / ((config.context + kBt - 1) / kBt);
  return std::make_shared<KvPool>(config, stride * static_cast<uint64_t>(blocks));
}

// The value every key entry of position p gets (values get its negation).
float Marker(int32_t token, int64_t p) { return static_cast<float>(token) * 1000.0f + static_cast<float>(p); }

// Appends `tokens` as the forward pass would: PrepareWrite, write every layer/head of every new
// position, Commit. Returns false when the pool had no block.
bool Append(KvCache& cache, const std::vector<int32_t>& tokens) {
  KvPool& pool = cache.pool();
  const int64_t start = cache.length();
  if (!cache.PrepareWrite(static_cast<int64_t>(tokens.size()))) return false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t p = start + static_cast<int64_t>(i);
    auto* block = static_cast<float*>(pool.data(cache.block_ids()[p / kBt]));
    for (int64_t layer = 0; layer < pool.layers(); ++layer) {
      for (int64_t h = 0; h < pool.heads(); ++h) {
        float* k = block + pool.BlockOffset(layer, 0, h, p % kBt);
        float* v = block + pool.BlockOffset(layer, 1, h, p % kBt);
        for (int64_t d = 0; d < pool.head_dim(); ++d) {
          k[d] = Marker(tokens[i], p);
          v[d] = -Marker(tokens[i], p);
        }
      }
    }
  }
  cache.Commit(tokens);
  return true;
}

std::vector<int32_t> Range(int32_t first, int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

// Every key of every layer and head equals the marker of the token at that position.
void ExpectHolds(const KvCache& cache, const std::vector<int32_t>& tokens) {
  ASSERT_EQ(cache.length(), static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(cache.tokens(), tokens);
  for (int64_t layer = 0; layer < cache.pool().layers(); ++layer) {
    const int64_t n = cache.length(), D = cache.pool().head_dim();
    const std::vector<float> keys = cache.KeysAsFloats(layer, n);      // [H, n, D]
    const std::vector<float> values = cache.ValuesAsFloats(layer, n);  // [H, n, D]
    for (int64_t p = 0; p < n; ++p) {
      ASSERT_EQ(keys[p * D], Marker(tokens[p], p)) << "layer " << layer << " position " << p;  // head 0, first
      ASSERT_EQ(values[(n + p) * D + D - 1], -Marker(tokens[p], p));                            // head 1, last
    }
  }
}

TEST(KvCacheTest, MemoryFollowsTheTokensInWholeBlocks) {
  const ModelConfig config = CacheConfig();
  auto pool = PoolOf(config, 64);
  KvCache cache(pool);
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.bytes(), 0);
  ASSERT_TRUE(Append(cache, Range(1, 17)));
  EXPECT_EQ(cache.blocks(), 2);
  EXPECT_EQ(cache.bytes(), 2 * static_cast<int64_t>(pool->block_bytes()));
  EXPECT_EQ(pool->block_bytes(),
            static_cast<uint64_t>(2 * config.layers * config.width * kBt) * sizeof(float));  // K and V
  EXPECT_EQ(pool->used(), 2);
  ExpectHolds(cache, Range(1, 17));
}

TEST(KvCacheTest, TruncateKeepsThePrefixAndReleasesWholeBlocks) {
  auto pool = PoolOf(CacheConfig(), 64);
  KvCache cache(pool);
  ASSERT_TRUE(Append(cache, Range(1, 40)));
  cache.Truncate(20);
  EXPECT_EQ(cache.blocks(), 2);
  ExpectHolds(cache, Range(1, 20));
  ASSERT_TRUE(Append(cache, Range(100, 5)));
  std::vector<int32_t> expected = Range(1, 20);
  for (int32_t id : Range(100, 5)) expected.push_back(id);
  ExpectHolds(cache, expected);
  cache.Clear();
  EXPECT_EQ(cache.blocks(), 0);
  EXPECT_EQ(pool->used(), 0);
}

TEST(KvCacheTest, ShareCostsNoCopyAndTheFirstWriteCopiesOneBlock) {
  auto pool = PoolOf(CacheConfig(), 64);
  KvCache original(pool);
  ASSERT_TRUE(Append(original, Range(1, 37)));  // blocks: 16 + 16 + 5
  const int32_t used_before = pool->used();
  KvCache fork = original.Share();
  EXPECT_EQ(pool->used(), used_before);  // no block copied
  EXPECT_EQ(fork.shared_blocks(), 3);
  EXPECT_EQ(original.own_blocks(), 0);
  ASSERT_TRUE(Append(fork, Range(200, 3)));  // writes into the shared partial block: copied
  EXPECT_EQ(pool->used(), used_before + 1);
  ASSERT_TRUE(Append(original, Range(300, 4)));  // its partial block is now its own again
  EXPECT_EQ(pool->used(), used_before + 1);
  std::vector<int32_t> a = Range(1, 37), b = Range(1, 37);
  for (int32_t id : Range(300, 4)) a.push_back(id);
  for (int32_t id : Range(200, 3)) b.push_back(id);
  ExpectHolds(original, a);
  ExpectHolds(fork, b);
}

TEST(KvCacheTest, AttachPrefixReusesFullBlocksOfEqualLeadingTokens) {
  auto pool = PoolOf(CacheConfig(), 64);
  KvCache first(pool);
  const std::vector<int32_t> prompt = Range(1, 45);  // two full blocks and 13 tokens
  ASSERT_TRUE(Append(first, prompt));
  EXPECT_EQ(pool->cached(), 0);

  KvCache same(pool);
  EXPECT_EQ(same.AttachPrefix(prompt), 32);  // whole blocks only
  EXPECT_EQ(same.shared_blocks(), 2);
  ExpectHolds(same, Range(1, 32));

  std::vector<int32_t> inside = prompt;  // diverges inside the second block
  inside[20] = 999;
  KvCache diverging(pool);
  EXPECT_EQ(diverging.AttachPrefix(inside), 16);

  std::vector<int32_t> boundary = prompt;  // diverges at the first token of the second block
  boundary[16] = 999;
  KvCache at_boundary(pool);
  EXPECT_EQ(at_boundary.AttachPrefix(boundary), 16);

  std::vector<int32_t> first_token = prompt;
  first_token[0] = 999;
  KvCache none(pool);
  EXPECT_EQ(none.AttachPrefix(first_token), 0);
  EXPECT_EQ(none.blocks(), 0);
}

TEST(KvCacheTest, ReleasedPrefixStaysCachedUntilItsBlocksAreNeeded) {
  auto pool = PoolOf(CacheConfig(), 4);
  const std::vector<int32_t> prompt = Range(1, 32);
  {
    KvCache first(pool);
    ASSERT_TRUE(Append(first, prompt));
  }
  EXPECT_EQ(pool->used(), 0);
  EXPECT_EQ(pool->cached(), 2);  // unreferenced, kept for reuse
  KvCache later(pool);
  EXPECT_EQ(later.AttachPrefix(prompt), 32);
  ExpectHolds(later, prompt);
  later.Clear();
  // Four blocks of other tokens need the two cached ones: they are evicted, newest chains last.
  KvCache other(pool);
  ASSERT_TRUE(Append(other, Range(500, 64)));
  EXPECT_EQ(pool->cached(), 0);
  EXPECT_GE(pool->evictions(), 2u);
  KvCache after(pool);
  EXPECT_EQ(after.AttachPrefix(prompt), 0);
}

TEST(KvCacheTest, AFullPoolRefusesWithoutChangingTheCacheAndAsksTheReclaimer) {
  auto pool = PoolOf(CacheConfig(), 3);
  KvCache held(pool);
  ASSERT_TRUE(Append(held, Range(1, 48)));  // every block in use
  KvCache cache(pool);
  EXPECT_FALSE(Append(cache, Range(100, 3)));
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.blocks(), 0);
  int asked = 0;
  pool->SetReclaimer([&] {
    ++asked;
    if (held.blocks() == 0) return false;
    held.Clear();
    return true;
  });
  EXPECT_TRUE(Append(cache, Range(100, 3)));
  EXPECT_EQ(asked, 1);
  ExpectHolds(cache, Range(100, 3));
}

TEST(KvCacheTest, ARegisteredBlockIsNeverWrittenInPlace) {
  auto pool = PoolOf(CacheConfig(), 16);
  KvCache first(pool);
  ASSERT_TRUE(Append(first, Range(1, 16)));  // one full block, registered
  first.Truncate(10);
  ASSERT_TRUE(Append(first, Range(700, 6)));  // rewrites positions 10..15: must copy the block
  KvCache second(pool);
  EXPECT_EQ(second.AttachPrefix(Range(1, 16)), 16);
  ExpectHolds(second, Range(1, 16));  // the registered block still holds the original tokens
  std::vector<int32_t> rewritten = Range(1, 10);
  for (int32_t id : Range(700, 6)) rewritten.push_back(id);
  ExpectHolds(first, rewritten);
}

TEST(KvCacheTest, OwnPoolHoldsFullContexts) {
  const ModelConfig config = CacheConfig(100);
  KvCache cache(config);
  ASSERT_TRUE(Append(cache, Range(1, 100)));
  EXPECT_EQ(cache.pool().capacity(), 4 * 7);  // four times ceil(100 / 16)
  KvCache shared = cache.Share();
  ExpectHolds(shared, Range(1, 100));
}

}  // namespace
}  // namespace niels::daemon::model
