#include "daemon/model/kv_cache.h"

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::model {
namespace {

using kernels::Dtype;

ModelConfig CacheConfig(int64_t context, Dtype dtype = Dtype::kF32) {
  ModelConfig config;
  config.vocab_size = 50;
  config.context = context;
  config.width = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 24;
  config.kv_dtype = dtype;
  return config;
}

// Appends n positions whose every key entry is `key_value` and every value entry -key_value, written
// through the storage view as the kernels write it.
void Append(KvCache& cache, const ModelConfig& config, int64_t n, float key_value) {
  cache.Reserve(n);
  const kernels::KvView view = cache.View();
  const int64_t D = config.head_dim(), element = kernels::DtypeSize(view.dtype);
  const std::vector<float> keys(D, key_value), values(D, -key_value);
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    for (int64_t h = 0; h < config.heads; ++h) {
      for (int64_t p = cache.length(); p < cache.length() + n; ++p) {
        const int64_t offset = (h * view.capacity + p) * D * element;
        kernels::simd::FromFloat(keys.data(), D, view.dtype, static_cast<std::byte*>(view.keys[layer]) + offset);
        kernels::simd::FromFloat(values.data(), D, view.dtype, static_cast<std::byte*>(view.values[layer]) + offset);
      }
    }
  }
  cache.Advance(n);
}

// Every float of positions [first, first + n) of a [H, length, D] readback equals `value`.
bool AllEqual(const std::vector<float>& rows, const ModelConfig& config, int64_t length, int64_t first, int64_t n,
              float value) {
  const int64_t D = config.head_dim();
  for (int64_t h = 0; h < config.heads; ++h) {
    for (int64_t i = (h * length + first) * D; i < (h * length + first + n) * D; ++i) {
      if (rows[i] != value) return false;
    }
  }
  return true;
}

// Bytes of K and V for `positions` positions over all layers.
int64_t BytesFor(const ModelConfig& config, int64_t positions) {
  return 2 * config.layers * config.heads * positions * config.head_dim() * kernels::DtypeSize(config.kv_dtype);
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
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    const std::vector<float> keys = cache.KeysAsFloats(layer, 70);  // [H, 70, D]
    ASSERT_EQ(keys.size(), static_cast<size_t>(config.heads * 70 * config.head_dim()));
    EXPECT_TRUE(AllEqual(keys, config, 70, 0, 60, 1.0f));
    EXPECT_TRUE(AllEqual(keys, config, 70, 60, 10, 2.0f));
    EXPECT_TRUE(AllEqual(cache.ValuesAsFloats(layer, 70), config, 70, 60, 10, -2.0f));
  }
}

TEST(KvCacheTest, TruncateKeepsPrefixAndClearFrees) {
  const ModelConfig config = CacheConfig(512);
  KvCache cache(config);
  Append(cache, config, 30, 1.0f);
  cache.Truncate(10);
  EXPECT_EQ(cache.length(), 10);
  Append(cache, config, 5, 3.0f);
  const std::vector<float> keys = cache.KeysAsFloats(0, 15);
  EXPECT_TRUE(AllEqual(keys, config, 15, 0, 10, 1.0f));
  EXPECT_TRUE(AllEqual(keys, config, 15, 10, 5, 3.0f));
  cache.Clear();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.bytes(), 0);
  Append(cache, config, 3, 4.0f);
  EXPECT_EQ(cache.length(), 3);
  EXPECT_THROW(cache.Truncate(4), std::out_of_range);
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
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    EXPECT_TRUE(AllEqual(copy.KeysAsFloats(layer, 21), config, 21, 0, 20, 1.0f));
    EXPECT_TRUE(AllEqual(copy.KeysAsFloats(layer, 21), config, 21, 20, 1, 9.0f));
    EXPECT_TRUE(AllEqual(original.KeysAsFloats(layer, 35), config, 35, 5, 30, 7.0f));
  }
}

// --kv-dtype f16: half the bytes per position, values rounded to f16 (1/3 is not representable).
TEST(KvCacheTest, F16CacheHoldsHalfTheBytesAndRoundsToHalf) {
  const ModelConfig f32 = CacheConfig(512), f16 = CacheConfig(512, Dtype::kF16);
  KvCache wide(f32), narrow(f16);
  EXPECT_EQ(narrow.dtype(), Dtype::kF16);
  Append(wide, f32, 100, 1.0f / 3.0f);
  Append(narrow, f16, 100, 1.0f / 3.0f);
  EXPECT_EQ(2 * narrow.bytes(), wide.bytes());
  const float rounded = kernels::HalfToFloat(kernels::FloatToHalf(1.0f / 3.0f));
  EXPECT_NE(rounded, 1.0f / 3.0f);
  EXPECT_TRUE(AllEqual(narrow.KeysAsFloats(1, 100), f16, 100, 0, 100, rounded));
  KvCache copy = narrow.Clone();
  EXPECT_EQ(copy.dtype(), Dtype::kF16);
  EXPECT_EQ(copy.KeysAsFloats(0, 100), narrow.KeysAsFloats(0, 100));
}

}  // namespace
}  // namespace niels::daemon::model
