#include "daemon/model/transformer.h"

#include <cmath>
#include <random>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

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

// Decodes `tokens` one by one into `cache` (B = 1), returning logits [n, V].
torch::Tensor DecodeEach(const Transformer& model, std::span<const int32_t> tokens, KvCache& cache) {
  std::vector<torch::Tensor> rows;
  KvCache* caches[] = {&cache};
  for (int32_t token : tokens) rows.push_back(model.Decode(std::span(&token, 1), caches)[0]);
  return at::stack(rows);
}

class TransformerTest : public ::testing::Test {
 protected:
  ModelConfig config_ = TinyConfig();
  Transformer model_{TinyConfig(), TinyWeights()};
};

TEST_F(TransformerTest, PrefillEqualsFullForward) {
  const auto tokens = RandomTokens(20, 1);
  const torch::Tensor full = model_.Forward(tokens);  // [20, V]
  ASSERT_EQ(full.sizes(), (at::IntArrayRef{20, config_.vocab_size}));
  KvCache cache(config_);
  EXPECT_LT(MaxAbsDiff(model_.Prefill(tokens, cache, /*all_logits=*/true), full), 1e-5);
  EXPECT_EQ(cache.length(), 20);
  KvCache last_only(config_);
  EXPECT_LT(MaxAbsDiff(model_.Prefill(tokens, last_only), full[19]), 1e-5);
  EXPECT_LT(MaxAbsDiff(model_.Forward(tokens, /*last_only=*/true), full[19]), 1e-5);
}

TEST_F(TransformerTest, PrefillInChunksEqualsFullForward) {
  const auto tokens = RandomTokens(25, 2);
  const torch::Tensor full = model_.Forward(tokens);
  KvCache cache(config_);
  const std::span<const int32_t> all(tokens);
  model_.Prefill(all.first(7), cache);
  const torch::Tensor second = model_.Prefill(all.subspan(7, 9), cache, /*all_logits=*/true);
  EXPECT_LT(MaxAbsDiff(second, full.narrow(0, 7, 9)), 1e-5);
  EXPECT_LT(MaxAbsDiff(model_.Prefill(all.subspan(16), cache), full[24]), 1e-5);
}

TEST_F(TransformerTest, PrefillThenDecodeEqualsFullForwardAtEveryPosition) {
  const auto tokens = RandomTokens(config_.context, 3);  // fills the context exactly
  const torch::Tensor full = model_.Forward(tokens);
  KvCache cache(config_);
  const std::span<const int32_t> all(tokens);
  EXPECT_LT(MaxAbsDiff(model_.Prefill(all.first(10), cache, true), full.narrow(0, 0, 10)), 1e-4);
  const torch::Tensor decoded = DecodeEach(model_, all.subspan(10), cache);
  EXPECT_LT(MaxAbsDiff(decoded, full.narrow(0, 10, config_.context - 10)), 1e-4);
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
    const torch::Tensor logits = model_.Decode(next, caches);  // [3, V]
    ASSERT_EQ(logits.sizes(), (at::IntArrayRef{3, config_.vocab_size}));
    for (int64_t s = 0; s < 3; ++s) {
      KvCache* own[] = {&alone[s]};
      const torch::Tensor single = model_.Decode(std::span(&next[s], 1), own);  // [1, V]
      EXPECT_LT(MaxAbsDiff(logits[s], single[0]), 1e-5) << "sequence " << s << " step " << step;
      EXPECT_EQ(batched[s].length(), prompt_lengths[s] + step + 1);
    }
  }
}

TEST_F(TransformerTest, AgreesWithNaiveScalarReference) {
  const auto tokens = RandomTokens(24, 4);
  const ScalarReference reference(config_, model_.weights(), ScalarReference::RopePairs::kAdjacent);
  const torch::Tensor expected = reference.Forward(tokens);  // [24, V]
  EXPECT_LT(MaxAbsDiff(model_.Forward(tokens), expected), 1e-4);
  // The reference is not trivially close to anything: logits vary across positions and tokens.
  EXPECT_GT(expected.std().item<float>(), 0.1);
}

TEST_F(TransformerTest, RopeRotatesAdjacentPairsNotHalves) {
  const auto tokens = RandomTokens(24, 5);
  const torch::Tensor logits = model_.Forward(tokens);
  const ScalarReference adjacent(config_, model_.weights(), ScalarReference::RopePairs::kAdjacent);
  const ScalarReference halves(config_, model_.weights(), ScalarReference::RopePairs::kHalves);
  EXPECT_LT(MaxAbsDiff(logits, adjacent.Forward(tokens)), 1e-4);
  EXPECT_GT(MaxAbsDiff(logits, halves.Forward(tokens)), 1e-2);
}

TEST_F(TransformerTest, ForwardTrainEqualsForwardAndGradientsReachEveryWeight) {
  Weights trainable = TinyWeights();
  for (torch::Tensor* t : ScalarReference::AllTensors(trainable)) *t = t->detach().clone().requires_grad_(true);
  const auto a = RandomTokens(12, 6);
  const auto b = RandomTokens(12, 7);
  std::vector<int64_t> ids(a.begin(), a.end());
  ids.insert(ids.end(), b.begin(), b.end());
  const torch::Tensor tokens = at::tensor(ids, at::kLong).view({2, 12});  // [B=2, n=12]

  const torch::Tensor logits = ForwardTrain(config_, trainable, tokens);  // [2, 12, V]
  ASSERT_EQ(logits.sizes(), (at::IntArrayRef{2, 12, config_.vocab_size}));
  EXPECT_TRUE(logits.requires_grad());
  EXPECT_LT(MaxAbsDiff(logits[0].detach(), model_.Forward(a)), 1e-5);
  EXPECT_LT(MaxAbsDiff(logits[1].detach(), model_.Forward(b)), 1e-5);

  const torch::Tensor targets = at::roll(tokens, -1, 1);  // next-token targets (wrapping is fine here)
  at::cross_entropy_loss(logits.view({-1, config_.vocab_size}), targets.reshape({-1})).backward();
  for (torch::Tensor* t : ScalarReference::AllTensors(trainable)) {
    ASSERT_TRUE(t->grad().defined());
    EXPECT_GT(t->grad().abs().sum().item<float>(), 0.0f) << "shape " << t->sizes();
  }
}

TEST_F(TransformerTest, ShareIsIndependent) {
  const auto tokens = RandomTokens(30, 8);
  const torch::Tensor full = model_.Forward(tokens);
  const std::span<const int32_t> all(tokens);
  KvCache original(config_);
  model_.Prefill(all.first(12), original);
  KvCache copy = original.Share();
  // The original continues with other tokens; the copy must still continue `tokens` exactly.
  DecodeEach(model_, RandomTokens(5, 9), original);
  EXPECT_LT(MaxAbsDiff(DecodeEach(model_, all.subspan(12, 10), copy), full.narrow(0, 12, 10)), 1e-4);
  EXPECT_EQ(original.length(), 17);
}

TEST_F(TransformerTest, TruncateThenPrefillEqualsFullForward) {
  auto tokens = RandomTokens(20, 11);
  KvCache cache(config_);
  model_.Prefill(tokens, cache);
  cache.Truncate(12);
  const auto tail = RandomTokens(8, 12);
  std::copy(tail.begin(), tail.end(), tokens.begin() + 12);
  const torch::Tensor logits = model_.Prefill(tail, cache, /*all_logits=*/true);
  EXPECT_LT(MaxAbsDiff(logits, model_.Forward(tokens).narrow(0, 12, 8)), 1e-5);
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
    ASSERT_EQ(trace.rows[s].sizes(), (at::IntArrayRef{config_.heads, lengths[s]}));
    EXPECT_LT(MaxAbsDiff(trace.rows[s].sum(-1), at::ones({config_.heads})), 1e-5);
    EXPECT_GE(trace.rows[s].min().item<float>(), 0.0f);
  }
}

TEST_F(TransformerTest, RejectsContextOverflow) {
  KvCache cache(config_);
  model_.Prefill(RandomTokens(30, 17), cache);
  EXPECT_THROW(model_.Prefill(RandomTokens(3, 18), cache), c10::Error);
  EXPECT_EQ(cache.length(), 30);
  EXPECT_THROW(model_.Forward(RandomTokens(33, 19)), c10::Error);
}

}  // namespace
}  // namespace niels::daemon::model
