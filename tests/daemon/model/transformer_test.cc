// Transformer (prefill, decode, uncached forward on daemon/kernels) on a tiny model: the three
// paths agree bitwise (they run the same row operations), and agree with the naive scalar
// reference (tests/torch holds libtorch's differentiable forward to the same logits).

#include "daemon/model/transformer.h"

#include <cmath>
#include <random>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/simd_kernels.h"
#include "tests/daemon/model/model_test_util.h"
#include "tests/daemon/model/scalar_reference.h"

namespace niels::daemon::model {
namespace {

ModelConfig TinyConfig() {
  ModelConfig config;
  config.vocab_size = 50;
  config.context = 32;
  config.width = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 24;
  config.rope_theta = 10000.0;
  return config;
}

// std 0.2 (not 0.02) so that attention is far from uniform and positions matter.
Weights TinyWeights(uint64_t seed = 7) { return RandomWeights(TinyConfig(), seed, 0.2); }

// Tokens of the tiny model's vocabulary.
std::vector<int32_t> RandomTokens(int64_t n, uint32_t seed) { return model::RandomTokens(n, seed, 50); }

class TransformerTest : public ::testing::Test {
 protected:
  ModelConfig config_ = TinyConfig();
  Transformer model_{TinyConfig(), TinyWeights()};
  int64_t V() const { return config_.vocab_size; }
};

TEST_F(TransformerTest, PrefillEqualsFullForward) {
  const auto tokens = RandomTokens(20, 1);
  const std::vector<float> full = model_.Forward(tokens);  // [20, V]
  ASSERT_EQ(full.size(), static_cast<size_t>(20 * V()));
  KvCache cache(config_);
  EXPECT_EQ(model_.Prefill(tokens, cache, /*all_logits=*/true), full);
  EXPECT_EQ(cache.length(), 20);
  KvCache last_only(config_);
  EXPECT_EQ(model_.Prefill(tokens, last_only), SliceRows(full, V(), 19, 1));
  EXPECT_EQ(model_.Forward(tokens, /*last_only=*/true), SliceRows(full, V(), 19, 1));
}

TEST_F(TransformerTest, PrefillInChunksEqualsFullForward) {
  const auto tokens = RandomTokens(25, 2);
  const std::vector<float> full = model_.Forward(tokens);
  KvCache cache(config_);
  const std::span<const int32_t> all(tokens);
  model_.Prefill(all.first(7), cache);
  EXPECT_EQ(model_.Prefill(all.subspan(7, 9), cache, /*all_logits=*/true), SliceRows(full, V(), 7, 9));
  EXPECT_EQ(model_.Prefill(all.subspan(16), cache), SliceRows(full, V(), 24, 1));
}

// Bitwise: a decoded token runs exactly the row operations a prefilled one does.
TEST_F(TransformerTest, PrefillThenDecodeEqualsFullForwardAtEveryPosition) {
  const auto tokens = RandomTokens(config_.context, 3);  // fills the context exactly
  const std::vector<float> full = model_.Forward(tokens);
  KvCache cache(config_);
  const std::span<const int32_t> all(tokens);
  EXPECT_EQ(model_.Prefill(all.first(10), cache, true), SliceRows(full, V(), 0, 10));
  EXPECT_EQ(DecodeEach(model_, all.subspan(10), cache), SliceRows(full, V(), 10, config_.context - 10));
  EXPECT_EQ(cache.length(), config_.context);
}

TEST_F(TransformerTest, BatchedDecodeEqualsEachSequenceAlone) {
  const std::vector<int64_t> prompt_lengths = {3, 9, 17};
  std::vector<KvCache> batched, alone;
  for (size_t s = 0; s < prompt_lengths.size(); ++s) {
    const auto prompt = RandomTokens(prompt_lengths[s], 10 + s);
    batched.emplace_back(config_);
    alone.emplace_back(config_);
    model_.Prefill(prompt, batched.back());
    model_.Prefill(prompt, alone.back());
  }
  std::vector<KvCache*> caches = {&batched[0], &batched[1], &batched[2]};
  for (int step = 0; step < 6; ++step) {
    const auto next = RandomTokens(3, 100 + step);
    const std::vector<float> logits = model_.Decode(next, caches);  // [3, V]
    ASSERT_EQ(logits.size(), static_cast<size_t>(3 * V()));
    for (int64_t s = 0; s < 3; ++s) {
      KvCache* own[] = {&alone[s]};
      EXPECT_EQ(SliceRows(logits, V(), s, 1), model_.Decode(std::span(&next[s], 1), own))
          << "sequence " << s << " step " << step;
      EXPECT_EQ(batched[s].length(), prompt_lengths[s] + step + 1);
    }
  }
}

TEST_F(TransformerTest, AgreesWithNaiveScalarReference) {
  const auto tokens = RandomTokens(24, 4);
  const ScalarReference reference(config_, model_.weights());
  const std::vector<float> expected = reference.Forward(tokens);  // [24, V]
  EXPECT_LT(MaxAbsDiff(model_.Forward(tokens), expected), 1e-4);
  // The reference is not trivially close to anything: logits vary across positions and tokens.
  EXPECT_GT(StdDev(expected), 0.1);
}

// Every kernel implementation this CPU runs (AVX-512, AVX2, portable), with every weight dtype and
// both KV dtypes: the same logits as the scalar reference on the same weights (rounding cached keys
// and values to f16 for an f16 KV cache; see forward_step_test.cc for the tolerance), and prefill,
// decode and the uncached forward bitwise equal to each other.
TEST_F(TransformerTest, EveryIsaAndDtypeAgreesWithTheScalarReference) {
  const auto tokens = RandomTokens(24, 20);
  for (kernels::simd::Isa isa : {kernels::simd::Isa::kAvx512, kernels::simd::Isa::kAvx2, kernels::simd::Isa::kPortable}) {
    if (!kernels::simd::ForceIsaForTesting(isa)) continue;
    for (kernels::Dtype dtype : {kernels::Dtype::kF32, kernels::Dtype::kF16, kernels::Dtype::kBF16}) {
      SCOPED_TRACE(std::string(kernels::simd::Name()) + " " + std::string(kernels::DtypeName(dtype)));
      for (kernels::Dtype kv : {kernels::Dtype::kF32, kernels::Dtype::kF16}) {
        SCOPED_TRACE("KV " + std::string(kernels::DtypeName(kv)));
        auto weights = ConvertWeights(TinyWeights(), dtype);
        ASSERT_TRUE(weights.ok());
        const Transformer model(config_, *weights, nullptr, kv);
        const std::vector<float> full = model.Forward(tokens);
        const ScalarReference reference(config_, model.weights(), kv);
        EXPECT_LT(MaxAbsDiff(full, reference.Forward(tokens)), kv == kernels::Dtype::kF32 ? 1e-4 : 2e-3);
        KvCache cache(config_, kv);
        const std::span<const int32_t> all(tokens);
        EXPECT_EQ(model.Prefill(all.first(9), cache, true), SliceRows(full, V(), 0, 9));
        EXPECT_EQ(DecodeEach(model, all.subspan(9), cache), SliceRows(full, V(), 9, 15));
      }
    }
  }
  kernels::simd::ForceIsaForTesting(kernels::simd::Detected());
}

// The Transformer fills its RoPE table in pieces as positions are reached: pieces give the table the
// formula gives at every position (with and without frequency factors).
TEST(RopeTableTest, FilledInPiecesEqualsTheFormulaAtEveryPosition) {
  ModelConfig config = TinyConfig();
  config.context = 600;
  const int64_t half = config.head_dim() / 2;
  const std::vector<float> factors = {1.0f, 2.0f, 4.0f, 8.0f};
  ASSERT_EQ(static_cast<int64_t>(factors.size()), half);
  for (std::span<const float> f : {std::span<const float>(), std::span<const float>(factors)}) {
    std::vector<float> table(static_cast<size_t>(config.context * half * 2), -9.0f);
    for (auto [first, last] : {std::pair<int64_t, int64_t>{0, 1}, {1, 37}, {37, 256}, {256, 512}, {512, 600}}) {
      FillRopeTable(config, f, first, last, table.data());
    }
    for (int64_t p = 0; p < config.context; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const double exponent = 2.0 * static_cast<double>(i) / static_cast<double>(config.head_dim());
        const double angle = static_cast<double>(p) / std::pow(config.rope_theta, exponent) / (f.empty() ? 1.0 : f[i]);
        ASSERT_NEAR(table[(p * half + i) * 2], std::cos(angle), 1e-6) << "p " << p << " i " << i;
        ASSERT_NEAR(table[(p * half + i) * 2 + 1], std::sin(angle), 1e-6) << "p " << p << " i " << i;
      }
    }
  }
}

// An idle engine frees the step's scratch; the steps after it size it again and compute the same.
TEST_F(TransformerTest, StepsAfterReleaseScratchComputeTheSame) {
  const auto tokens = RandomTokens(24, 6);
  const std::vector<float> before = model_.Forward(tokens);
  KvCache cache(config_);
  const std::vector<float> prefix = model_.Prefill(std::span(tokens).first(20), cache);
  model_.ReleaseScratch();
  KvCache* caches[] = {&cache};
  const std::vector<float> next = model_.Decode(std::span(tokens).subspan(20, 1), caches);
  model_.ReleaseScratch();
  EXPECT_EQ(model_.Forward(tokens), before);
  EXPECT_EQ(next, SliceRows(before, V(), 20, 1));
  EXPECT_EQ(prefix, SliceRows(before, V(), 19, 1));
}

TEST_F(TransformerTest, RopeRotatesAdjacentPairsNotHalves) {
  const auto tokens = RandomTokens(24, 5);
  const std::vector<float> logits = model_.Forward(tokens);
  const ScalarReference adjacent(config_, model_.weights());
  ModelConfig other = config_;
  other.rope_pairs = RopePairs::kHalves;
  const ScalarReference halves(other, model_.weights());
  EXPECT_LT(MaxAbsDiff(logits, adjacent.Forward(tokens)), 1e-4);
  EXPECT_GT(MaxAbsDiff(logits, halves.Forward(tokens)), 1e-2);
}

TEST_F(TransformerTest, ShareIsIndependent) {
  const auto tokens = RandomTokens(30, 8);
  const std::vector<float> full = model_.Forward(tokens);
  const std::span<const int32_t> all(tokens);
  KvCache original(config_);
  model_.Prefill(all.first(12), original);
  KvCache copy = original.Share();
  // The original continues with other tokens; the copy must still continue `tokens` exactly.
  DecodeEach(model_, RandomTokens(5, 9), original);
  EXPECT_EQ(DecodeEach(model_, all.subspan(12, 10), copy), SliceRows(full, V(), 12, 10));
  EXPECT_EQ(original.length(), 17);
}

TEST_F(TransformerTest, TruncateThenPrefillEqualsFullForward) {
  auto tokens = RandomTokens(20, 11);
  KvCache cache(config_);
  model_.Prefill(tokens, cache);
  cache.Truncate(12);
  const auto tail = RandomTokens(8, 12);
  std::copy(tail.begin(), tail.end(), tokens.begin() + 12);
  EXPECT_EQ(model_.Prefill(tail, cache, /*all_logits=*/true), SliceRows(model_.Forward(tokens), V(), 12, 8));
}

TEST_F(TransformerTest, KvBytesGrowWithCachedTokensNotContext) {
  ModelConfig medium_context = config_, long_context = config_;
  medium_context.context = 256;
  long_context.context = 1024;
  const Transformer medium_model(medium_context, TinyWeights());
  const Transformer long_model(long_context, TinyWeights());
  const auto tokens = RandomTokens(10, 13);
  KvCache medium_cache(medium_context);
  KvCache long_cache(long_context);
  medium_model.Prefill(tokens, medium_cache);
  long_model.Prefill(tokens, long_cache);
  EXPECT_EQ(long_cache.bytes(), medium_cache.bytes());
  const int64_t per_position = 2 * config_.layers * config_.width * static_cast<int64_t>(sizeof(float));
  EXPECT_LE(long_cache.bytes(), 64 * per_position);
  const int64_t before = long_cache.bytes();
  long_model.Prefill(RandomTokens(100, 14), long_cache);
  EXPECT_GT(long_cache.bytes(), before);
  EXPECT_LT(long_cache.bytes(), (110 + 64) * per_position);
  // A cache never holds more than T positions.
  KvCache full(config_);
  model_.Prefill(RandomTokens(config_.context, 15), full);
  EXPECT_EQ(full.bytes(), config_.context * per_position);
}

// An f16 KV cache takes half the bytes of an f32 one, moves the logits only by f16 rounding of
// the keys and values (a 2^-11 relative step: the logits stay within 1e-2 of the f32 cache's here,
// yet differ), and sharing a prefix of its blocks changes no result bit.
TEST_F(TransformerTest, F16KvHalvesTheBytesAndSharesPrefixesExactly) {
  const Transformer f16_model(config_, TinyWeights(), nullptr, kernels::Dtype::kF16);
  const auto tokens = RandomTokens(config_.context, 16);
  KvCache f32_cache(config_), f16_cache(config_, kernels::Dtype::kF16);
  const std::vector<float> f32_logits = model_.Prefill(tokens, f32_cache, true);
  const std::vector<float> f16_logits = f16_model.Prefill(tokens, f16_cache, true);
  EXPECT_EQ(2 * f16_cache.bytes(), f32_cache.bytes());
  EXPECT_EQ(2 * f16_cache.pool().block_bytes(), f32_cache.pool().block_bytes());
  EXPECT_NE(f16_logits, f32_logits);
  EXPECT_LT(MaxAbsDiff(f16_logits, f32_logits), 1e-2);
  EXPECT_EQ(f16_logits, f16_model.Forward(tokens));
  // A second sequence with the same first 16 tokens (one full block) starts from the first one's
  // registered block and prefills the rest: the same logits as prefilling everything itself.
  std::vector<int32_t> other = RandomTokens(24, 17);
  std::copy(tokens.begin(), tokens.begin() + 16, other.begin());
  KvCache shared(f16_cache.shared_pool());
  ASSERT_EQ(shared.AttachPrefix(other), 16);
  EXPECT_EQ(shared.shared_blocks(), 1);
  const std::span<const int32_t> rest = std::span<const int32_t>(other).subspan(16);
  EXPECT_EQ(f16_model.Prefill(rest, shared, true), SliceRows(f16_model.Forward(other), V(), 16, 8));
}

TEST_F(TransformerTest, AttentionTraceRowsAreDistributions) {
  KvCache first(config_), second(config_);
  model_.Prefill(RandomTokens(4, 15), first);
  model_.Prefill(RandomTokens(11, 16), second);
  KvCache* caches[] = {&first, &second};
  AttentionTrace trace;
  trace.layer = 1;
  const std::vector<int32_t> next = {3, 4};
  model_.Decode(next, caches, &trace);
  ASSERT_EQ(trace.rows.size(), 2u);
  const int64_t lengths[] = {5, 12};
  for (int s = 0; s < 2; ++s) {
    const std::vector<float>& row = trace.rows[s];  // [H, length]
    ASSERT_EQ(row.size(), static_cast<size_t>(config_.heads * lengths[s]));
    for (int64_t h = 0; h < config_.heads; ++h) {
      double sum = 0;
      for (int64_t j = 0; j < lengths[s]; ++j) {
        EXPECT_GE(row[h * lengths[s] + j], 0.0f);
        sum += row[h * lengths[s] + j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << "head " << h;
    }
  }
}

TEST_F(TransformerTest, RejectsContextOverflowAndBadTokens) {
  KvCache cache(config_);
  model_.Prefill(RandomTokens(30, 17), cache);
  EXPECT_THROW(model_.Prefill(RandomTokens(3, 18), cache), std::invalid_argument);
  EXPECT_EQ(cache.length(), 30);
  EXPECT_THROW(model_.Forward(RandomTokens(33, 19)), std::invalid_argument);
  const std::vector<int32_t> bad = {1, 50};
  KvCache fresh(config_);
  EXPECT_THROW(model_.Prefill(bad, fresh), std::invalid_argument);
  EXPECT_EQ(fresh.length(), 0);
  EXPECT_THROW(model_.Forward(bad), std::invalid_argument);
}

}  // namespace
}  // namespace niels::daemon::model
