#include "daemon/model/kv_cache.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

namespace niels::daemon::model {
namespace {

ModelConfig CacheConfig(int64_t context) {
  ModelConfig config;
  config.vocab_size = 50;
  config.context = context;
  config.width = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 24;
  return config;
}

// Appends n positions whose every key entry is `key_value` and every value entry -key_value.
void Append(KvCache& cache, const ModelConfig& config, int64_t n, float key_value) {
  c10::InferenceMode guard;
  cache.Reserve(n);
  torch::Tensor k = at::full({config.heads, n, config.head_dim()}, key_value);
  for (int64_t layer = 0; layer < config.layers; ++layer) cache.Write(layer, k, -k);
  cache.Advance(n);
}

// Bytes of K and V for `positions` positions over all layers.
int64_t BytesFor(const ModelConfig& config, int64_t positions) {
  return 2 * config.layers * config.heads * positions * config.head_dim() * static_cast<int64_t>(sizeof(float));
}

TEST(KvCacheTest, EmptyCacheHoldsNoStorage) {
  KvCache cache(CacheConfig(512));
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.bytes(), 0);
}

TEST(KvCacheTest, BytesFollowCachedTokensNotContext) {
  const ModelConfig small_t = CacheConfig(512);
  const ModelConfig large_t = CacheConfig(4096);
  KvCache a(small_t);
  KvCache b(large_t);
  Append(a, small_t, 1, 1.0f);
  Append(b, large_t, 1, 1.0f);
  EXPECT_EQ(a.bytes(), b.bytes());
  EXPECT_LE(a.bytes(), BytesFor(small_t, 64));
  const int64_t after_one = a.bytes();
  Append(a, small_t, 199, 1.0f);
  Append(b, large_t, 199, 1.0f);
  EXPECT_EQ(a.length(), 200);
  EXPECT_EQ(a.bytes(), b.bytes());
  EXPECT_GT(a.bytes(), after_one);
  EXPECT_GE(a.bytes(), BytesFor(small_t, 200));
  EXPECT_LT(a.bytes(), BytesFor(small_t, 200 + 64));
}

TEST(KvCacheTest, CapacityNeverExceedsContext) {
  const ModelConfig config = CacheConfig(40);
  KvCache cache(config);
  Append(cache, config, 40, 1.0f);
  EXPECT_EQ(cache.capacity(), 40);
  EXPECT_EQ(cache.bytes(), BytesFor(config, 40));
}

TEST(KvCacheTest, KeepsWrittenValuesAcrossGrowth) {
  const ModelConfig config = CacheConfig(512);
  KvCache cache(config);
  Append(cache, config, 60, 1.0f);
  Append(cache, config, 10, 2.0f);  // crosses a chunk boundary: storage is reallocated
  c10::InferenceMode guard;
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    torch::Tensor keys = cache.Keys(layer, 70);  // [H, 70, D]
    ASSERT_EQ(keys.sizes(), (at::IntArrayRef{config.heads, 70, config.head_dim()}));
    EXPECT_TRUE(at::all(keys.narrow(1, 0, 60) == 1.0f).item<bool>());
    EXPECT_TRUE(at::all(keys.narrow(1, 60, 10) == 2.0f).item<bool>());
    EXPECT_TRUE(at::all(cache.Values(layer, 70).narrow(1, 60, 10) == -2.0f).item<bool>());
  }
}

TEST(KvCacheTest, TruncateKeepsPrefixAndClearFrees) {
  const ModelConfig config = CacheConfig(512);
  KvCache cache(config);
  Append(cache, config, 30, 1.0f);
  cache.Truncate(10);
  EXPECT_EQ(cache.length(), 10);
  Append(cache, config, 5, 3.0f);
  {
    c10::InferenceMode guard;
    torch::Tensor keys = cache.Keys(0, 15);
    EXPECT_TRUE(at::all(keys.narrow(1, 0, 10) == 1.0f).item<bool>());
    EXPECT_TRUE(at::all(keys.narrow(1, 10, 5) == 3.0f).item<bool>());
  }
  cache.Clear();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.bytes(), 0);
  Append(cache, config, 3, 4.0f);
  EXPECT_EQ(cache.length(), 3);
}

TEST(KvCacheTest, CloneIsIndependent) {
  const ModelConfig config = CacheConfig(512);
  KvCache original(config);
  Append(original, config, 20, 1.0f);
  KvCache copy = original.Clone();
  EXPECT_EQ(copy.length(), 20);
  EXPECT_LE(copy.bytes(), BytesFor(config, 64));
  original.Truncate(5);
  Append(original, config, 30, 7.0f);  // overwrites positions 5.. of the original's storage
  Append(copy, config, 1, 9.0f);
  c10::InferenceMode guard;
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    EXPECT_TRUE(at::all(copy.Keys(layer, 21).narrow(1, 0, 20) == 1.0f).item<bool>());
    EXPECT_TRUE(at::all(copy.Keys(layer, 21).narrow(1, 20, 1) == 9.0f).item<bool>());
    EXPECT_TRUE(at::all(original.Keys(layer, 35).narrow(1, 5, 30) == 7.0f).item<bool>());
  }
}

}  // namespace
}  // namespace niels::daemon::model
