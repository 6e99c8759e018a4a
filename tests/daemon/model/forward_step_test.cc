// The forward step (daemon/model/forward_step.h, reached through Transformer's Prefill, Decode
// and Forward) on models large enough that its matrix products and attention are split across
// worker threads, for 1-3 threads, head dims that exercise every branch of the SIMD kernels, f32,
// f16 and bf16 weights, and f32 and f16 KV caches. The references are the naive scalar forward of
// scalar_reference.h (on the same 16-bit weights, rounding cached keys and values to f16 for an f16
// KV cache), for the logits and for the attention trace.

#include <algorithm>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/worker_pool.h"
#include "daemon/model/transformer.h"
#include "tests/daemon/model/model_test_util.h"
#include "tests/daemon/model/scalar_reference.h"

namespace niels::daemon::model {
namespace {

using kernels::Dtype;

// D = 72 (one 64-column block plus a tail of 8) and D = 20 (a masked tail only); C = 144 and 80
// give products above MatVec's threshold for running on the workers; T = 150 spans ten KV blocks
// (the last one partly).
ModelConfig MidConfig(int64_t width, int64_t heads) {
  ModelConfig config;
  config.vocab_size = 301;
  config.context = 150;
  config.width = width;
  config.heads = heads;
  config.layers = 2;
  config.d_ff = 3 * width - 5;
  return config;
}

// std 0.1: attention clearly position-dependent, logits far from uniform. Matrices in `dtype`.
Weights MidWeights(const ModelConfig& config, Dtype dtype) {
  common::StatusOr<Weights> converted = ConvertWeights(RandomWeights(config, 11, 0.1), dtype);
  EXPECT_TRUE(converted.ok()) << converted.status().ToString();
  return std::move(converted).value();
}

// Parameters: (width, heads, worker threads, weight dtype, KV dtype).
using Params = std::tuple<int64_t, int64_t, int, Dtype, Dtype>;

class ForwardStepTest : public ::testing::TestWithParam<Params> {
 protected:
  ModelConfig config_ = MidConfig(std::get<0>(GetParam()), std::get<1>(GetParam()));
  Dtype kv_ = std::get<4>(GetParam());
  Transformer model_{config_, MidWeights(config_, std::get<3>(GetParam())),
                     std::make_shared<kernels::WorkerPool>(std::get<2>(GetParam())), kv_};
  int64_t V() const { return config_.vocab_size; }
  // The scalar reference sums in double. With an f16 KV cache both round each key and value to f16,
  // but a key computed a rounding error apart can round to the neighbouring f16 (a 2^-11 relative
  // step) and move the logits by far more than the f32 sums do: measured max |diff| 1.1e-3 on these
  // models, so 2e-3.
  double Tolerance() const { return kv_ == Dtype::kF32 ? 1e-4 : 2e-3; }
};

TEST_P(ForwardStepTest, DecodeAfterPrefillEqualsFullForwardAndScalarReference) {
  ASSERT_EQ(model_.weights().dtype(), std::get<3>(GetParam()));
  ASSERT_EQ(model_.kv_dtype(), kv_);
  const auto tokens = RandomTokens(config_.context, 1, V());
  const std::span<const int32_t> all(tokens);
  const std::vector<float> full = model_.Forward(tokens);  // [T, V]
  const ScalarReference reference(config_, model_.weights(), kv_);
  const std::vector<float> naive = reference.Forward(tokens);  // [T, V]
  KvCache cache(config_, kv_);
  ASSERT_EQ(model_.Prefill(all.first(5), cache, /*all_logits=*/true), SliceRows(full, V(), 0, 5));
  std::vector<float> decoded;
  KvCache* caches[] = {&cache};
  for (int32_t token : all.subspan(5)) {
    const std::vector<float> row = model_.Decode(std::span(&token, 1), caches);
    decoded.insert(decoded.end(), row.begin(), row.end());
  }
  EXPECT_EQ(decoded, SliceRows(full, V(), 5, config_.context - 5)) << "decode differs from the full forward";
  EXPECT_LT(MaxAbsDiff(full, naive), Tolerance());
  EXPECT_GT(StdDev(naive), 0.1) << "the reference logits are not trivially flat";
  EXPECT_EQ(cache.length(), config_.context);
}

// Batch invariance: a sequence's logits and attention trace are bitwise the same (compared with ==)
// alone, in batches of 2, 8, 11 and 16 (register tiles of every shape, with and without remainder
// rows), whatever the other sequences are and in whatever order they come.
TEST_P(ForwardStepTest, EachSequenceIsBitwiseTheSameInEveryBatchComposition) {
  constexpr int kSequences = 16, kSteps = 3;
  std::vector<KvCache> prefilled;
  for (int s = 0; s < kSequences; ++s) {
    prefilled.emplace_back(config_, kv_);
    model_.Prefill(RandomTokens(1 + (s * 37) % 120, 300 + s, V()), prefilled.back());
  }
  std::vector<std::vector<int32_t>> next;  // next[s][step]
  for (int s = 0; s < kSequences; ++s) next.push_back(RandomTokens(kSteps, 400 + s, V()));
  // Runs kSteps decode steps of `members` together (on shares of their caches: the first write copies the shared last block); returns per
  // member and step the logits row [V] and the layer-1 trace [H, length].
  using Output = std::pair<std::vector<float>, std::vector<float>>;
  auto run = [&](const std::vector<int>& members) {
    std::vector<KvCache> caches;
    for (int s : members) caches.push_back(prefilled[s].Share());
    std::vector<KvCache*> pointers;
    for (KvCache& cache : caches) pointers.push_back(&cache);
    std::vector<std::vector<Output>> out(members.size());
    for (int step = 0; step < kSteps; ++step) {
      std::vector<int32_t> tokens;
      for (int s : members) tokens.push_back(next[s][step]);
      AttentionTrace trace;
      trace.layer = 1;
      const std::vector<float> logits = model_.Decode(tokens, pointers, &trace);
      for (size_t b = 0; b < members.size(); ++b) out[b].emplace_back(SliceRows(logits, V(), b, 1), trace.rows[b]);
    }
    return out;
  };
  std::vector<std::vector<Output>> solo;
  for (int s = 0; s < kSequences; ++s) solo.push_back(run({s})[0]);
  std::vector<int> all(kSequences), reversed(kSequences);
  for (int s = 0; s < kSequences; ++s) all[s] = s, reversed[s] = kSequences - 1 - s;
  const std::vector<std::vector<int>> compositions = {
      {3, 12}, {12, 3}, {0, 1, 2, 3, 4, 5, 6, 7}, {9, 2, 14, 7, 11, 0, 5, 13, 8, 1, 15}, all, reversed};
  for (const std::vector<int>& members : compositions) {
    const auto batched = run(members);
    for (size_t b = 0; b < members.size(); ++b) {
      for (int step = 0; step < kSteps; ++step) {
        const int s = members[b];
        ASSERT_EQ(batched[b][step].first, solo[s][step].first)
            << "logits of sequence " << s << " step " << step << " in a batch of " << members.size();
        ASSERT_EQ(batched[b][step].second, solo[s][step].second)
            << "trace of sequence " << s << " step " << step << " in a batch of " << members.size();
      }
    }
  }
}

// Chunk boundaries never change a result: 150 tokens prefilled in pieces of 1, 17, 64 and the rest
// leave the same cache and logits as one prefill.
TEST_P(ForwardStepTest, PrefillChunksGiveBitwiseTheSameCacheAndLogits) {
  const auto tokens = RandomTokens(config_.context, 2, V());
  const std::span<const int32_t> all(tokens);
  KvCache whole(config_, kv_), pieces(config_, kv_);
  const std::vector<float> expected = model_.Prefill(all, whole, /*all_logits=*/true);
  std::vector<float> logits;
  for (auto [begin, n] : {std::pair{0, 1}, {1, 17}, {18, 64}, {82, 68}}) {
    const std::vector<float> part = model_.Prefill(all.subspan(begin, n), pieces, /*all_logits=*/true);
    logits.insert(logits.end(), part.begin(), part.end());
  }
  EXPECT_EQ(logits, expected);
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    EXPECT_EQ(pieces.KeysAsFloats(layer, config_.context), whole.KeysAsFloats(layer, config_.context));
    EXPECT_EQ(pieces.ValuesAsFloats(layer, config_.context), whole.ValuesAsFloats(layer, config_.context));
  }
}

TEST_P(ForwardStepTest, TraceIsTheSoftmaxOfScaledQueryKeyProducts) {
  const auto tokens = RandomTokens(40, 30, V());
  const std::span<const int32_t> all(tokens);
  KvCache cache(config_, kv_);
  model_.Prefill(all.first(39), cache);
  KvCache* caches[] = {&cache};
  AttentionTrace trace;
  trace.layer = 0;
  const std::vector<float> logits = model_.Decode(all.subspan(39), caches, &trace);
  EXPECT_EQ(logits, model_.Forward(tokens, /*last_only=*/true));
  // Layer 0's attention of position 39 recomputed by the naive scalar reference (its own keys, in
  // double, rounded to f16 like an f16 cache).
  const ScalarReference reference(config_, model_.weights(), kv_);
  std::vector<float> probs;  // [H, 40]
  reference.Forward(tokens, /*trace_layer=*/0, &probs);
  EXPECT_LT(MaxAbsDiff(trace.rows[0], probs), 1e-5);
  EXPECT_GT(*std::max_element(trace.rows[0].begin(), trace.rows[0].end()), 2.0f / 40) << "attention is not uniform";
}

TEST_P(ForwardStepTest, RejectsBadTokensAndFullCachesWithoutTouchingThem) {
  KvCache cache(config_, kv_), full(config_, kv_);
  model_.Prefill(RandomTokens(7, 40, V()), cache);
  model_.Prefill(RandomTokens(config_.context, 41, V()), full);
  KvCache* one[] = {&cache};
  const int32_t bad[] = {static_cast<int32_t>(V())};
  const int32_t negative[] = {-1};
  EXPECT_THROW(model_.Decode(bad, one), std::invalid_argument);
  EXPECT_THROW(model_.Decode(negative, one), std::invalid_argument);
  KvCache* both[] = {&cache, &full};
  const int32_t two[] = {1, 2};
  EXPECT_THROW(model_.Decode(two, both), std::invalid_argument);
  KvCache* twice[] = {&cache, &cache};
  EXPECT_THROW(model_.Decode(two, twice), std::invalid_argument);
  EXPECT_EQ(cache.length(), 7);
  EXPECT_EQ(full.length(), config_.context);
}

std::string ParamName(const ::testing::TestParamInfo<Params>& info) {
  auto [width, heads, threads, dtype, kv] = info.param;
  return "C" + std::to_string(width) + "H" + std::to_string(heads) + "T" + std::to_string(threads) + "_" +
         std::string(kernels::DtypeName(dtype)) + "_kv" + std::string(kernels::DtypeName(kv));
}

INSTANTIATE_TEST_SUITE_P(WidthsHeadsThreads, ForwardStepTest,
                         ::testing::Combine(::testing::Values(int64_t{144}), ::testing::Values(int64_t{2}),
                                            ::testing::Values(1, 2, 3), ::testing::Values(Dtype::kF32),
                                            ::testing::Values(Dtype::kF32)),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(NarrowHeads, ForwardStepTest,
                         ::testing::Combine(::testing::Values(int64_t{80}), ::testing::Values(int64_t{4}),
                                            ::testing::Values(1, 2), ::testing::Values(Dtype::kF32),
                                            ::testing::Values(Dtype::kF32)),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(SixteenBitWeights, ForwardStepTest,
                         ::testing::Values(Params{144, 2, 2, Dtype::kF16, Dtype::kF32},
                                           Params{144, 2, 2, Dtype::kBF16, Dtype::kF32},
                                           Params{80, 4, 1, Dtype::kF16, Dtype::kF32},
                                           Params{80, 4, 2, Dtype::kBF16, Dtype::kF32}),
                         ParamName);
// An f16 KV cache (nielsd --kv-dtype f16), with f32 and 16-bit weights, 1 and 2 threads, both head dims.
INSTANTIATE_TEST_SUITE_P(SixteenBitKv, ForwardStepTest,
                         ::testing::Values(Params{144, 2, 2, Dtype::kF32, Dtype::kF16},
                                           Params{144, 2, 1, Dtype::kF16, Dtype::kF16},
                                           Params{80, 4, 2, Dtype::kF32, Dtype::kF16},
                                           Params{80, 4, 1, Dtype::kBF16, Dtype::kF16}),
                         ParamName);

// A long prompt (600 rows in one step, many query blocks per head) gives the same logits and cache
// as the same tokens decoded one by one. Two models of the same weights, so that the decoding one
// fills its RoPE table a block of rows at a time as the positions grow, and the prefilling one up
// to 700 at once.
TEST(LongPrefillTest, SixHundredTokensInOneStepEqualDecodingEachToken) {
  ModelConfig config;
  config.vocab_size = 97, config.context = 700, config.width = 32, config.layers = 2, config.heads = 2, config.d_ff = 40;
  const Transformer prefilling(config, RandomWeights(config, 3, 0.1), std::make_shared<kernels::WorkerPool>(2));
  const Transformer decoding(config, RandomWeights(config, 3, 0.1), std::make_shared<kernels::WorkerPool>(2));
  const auto tokens = RandomTokens(600, 4, config.vocab_size);
  KvCache prefilled(config), decoded(config);
  KvCache* caches[] = {&decoded};
  std::vector<float> decoded_logits;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<float> row = decoding.Decode(std::span(&tokens[i], 1), caches);
    decoded_logits.insert(decoded_logits.end(), row.begin(), row.end());
  }
  const std::vector<float> logits = prefilling.Prefill(tokens, prefilled, /*all_logits=*/true);
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_EQ(SliceRows(decoded_logits, config.vocab_size, i, 1), SliceRows(logits, config.vocab_size, i, 1))
        << "position " << i;
  }
  EXPECT_EQ(prefilled.KeysAsFloats(1, 600), decoded.KeysAsFloats(1, 600));
}

}  // namespace
}  // namespace niels::daemon::model
