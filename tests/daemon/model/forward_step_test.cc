// The forward step (forward_step.h, reached through Transformer::Decode and Prefill) on models large enough that
// its matrix-vector products and attention are split across worker threads, for 1-3 threads and
// head dims that exercise every branch of the SIMD kernels. The reference is the libtorch forward
// and the naive scalar implementation of scalar_reference.h.

#include <memory>
#include <span>
#include <utility>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "daemon/model/transformer.h"
#include "daemon/model/transformer_stages.h"
#include "daemon/kernels/worker_pool.h"
#include "tests/daemon/model/model_test_util.h"
#include "tests/daemon/model/scalar_reference.h"

namespace niels::daemon::model {
namespace {

// D = 72 (one 64-column block plus a tail of 8) and D = 20 (a masked tail only); C = 144 and 80
// give products above MatVec's threshold for running on the workers; T = 150 crosses the KV
// cache's 64-position chunks twice.
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

// Parameters: (width, heads, worker threads).
class ForwardStepTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int>> {
 protected:
  ModelConfig config_ = MidConfig(std::get<0>(GetParam()), std::get<1>(GetParam()));
  // std 0.1: attention clearly position-dependent, logits far from uniform.
  Transformer model_{config_, RandomWeights(config_, 11, 0.1),
                     std::make_shared<kernels::WorkerPool>(std::get<2>(GetParam()))};
};

TEST_P(ForwardStepTest, DecodeAfterPrefillEqualsFullForwardAndScalarReference) {
  const auto tokens = RandomTokens(config_.context, 1, config_.vocab_size);
  const std::span<const int32_t> all(tokens);
  const torch::Tensor full = model_.Forward(tokens);  // [T, V]
  const ScalarReference reference(config_, model_.weights(), ScalarReference::RopePairs::kAdjacent);
  const torch::Tensor naive = reference.Forward(tokens);  // [T, V]
  KvCache cache(config_);
  model_.Prefill(all.first(5), cache);
  std::vector<torch::Tensor> rows;
  KvCache* caches[] = {&cache};
  for (int32_t token : all.subspan(5)) rows.push_back(model_.Decode(std::span(&token, 1), caches)[0]);
  const torch::Tensor decoded = at::stack(rows);  // [T - 5, V]
  EXPECT_LT(MaxAbsDiff(decoded, full.narrow(0, 5, config_.context - 5)), 1e-4);
  EXPECT_LT(MaxAbsDiff(decoded, naive.narrow(0, 5, config_.context - 5)), 1e-4);
  EXPECT_GT(naive.std().item<float>(), 0.1) << "the reference logits are not trivially flat";
  EXPECT_EQ(cache.length(), config_.context);
}

TEST_P(ForwardStepTest, BatchedDecodeEqualsEachSequenceAlone) {
  const std::vector<int64_t> prompt_lengths = {1, 63, 100};  // around a chunk boundary
  std::vector<KvCache> batched, alone;
  for (size_t s = 0; s < prompt_lengths.size(); ++s) {
    const auto prompt = RandomTokens(prompt_lengths[s], 20 + s, config_.vocab_size);
    batched.emplace_back(config_);
    alone.emplace_back(config_);
    model_.Prefill(prompt, batched.back());
    model_.Prefill(prompt, alone.back());
  }
  std::vector<KvCache*> caches = {&batched[0], &batched[1], &batched[2]};
  for (int step = 0; step < 4; ++step) {
    const auto next = RandomTokens(3, 200 + step, config_.vocab_size);
    const torch::Tensor logits = model_.Decode(next, caches);  // [3, V]
    for (int64_t s = 0; s < 3; ++s) {
      KvCache* own[] = {&alone[s]};
      const torch::Tensor single = model_.Decode(std::span(&next[s], 1), own);  // [1, V]
      EXPECT_LT(MaxAbsDiff(logits[s], single[0]), 1e-5) << "sequence " << s << " step " << step;
    }
  }
}

// Batch invariance: a sequence's logits and attention trace are bitwise the same (compared with ==)
// alone, in batches of 2, 8 (row-by-row products), 11 and 16 (the GEMM-shaped tile, with and
// without a remainder row), whatever the other sequences are and in whatever order they come.
TEST_P(ForwardStepTest, EachSequenceIsBitwiseTheSameInEveryBatchComposition) {
  constexpr int kSequences = 16, kSteps = 3;
  std::vector<KvCache> prefilled;
  for (int s = 0; s < kSequences; ++s) {
    prefilled.emplace_back(config_);
    model_.Prefill(RandomTokens(1 + (s * 37) % 120, 300 + s, config_.vocab_size), prefilled.back());
  }
  std::vector<std::vector<int32_t>> next;  // next[s][step]
  for (int s = 0; s < kSequences; ++s) next.push_back(RandomTokens(kSteps, 400 + s, config_.vocab_size));
  // Runs kSteps decode steps of `members` together (on fresh clones of their caches); returns per
  // member and step the logits row [V] and the layer-1 trace [H, length].
  auto run = [&](const std::vector<int>& members) {
    std::vector<KvCache> caches;
    for (int s : members) caches.push_back(prefilled[s].Share());
    std::vector<KvCache*> pointers;
    for (KvCache& cache : caches) pointers.push_back(&cache);
    std::vector<std::vector<std::pair<torch::Tensor, torch::Tensor>>> out(members.size());
    for (int step = 0; step < kSteps; ++step) {
      std::vector<int32_t> tokens;
      for (int s : members) tokens.push_back(next[s][step]);
      AttentionTrace trace;
      trace.layer = 1;
      const torch::Tensor logits = model_.Decode(tokens, pointers, &trace);
      for (size_t b = 0; b < members.size(); ++b) out[b].emplace_back(logits[b].clone(), trace.rows[b]);
    }
    return out;
  };
  std::vector<std::vector<std::pair<torch::Tensor, torch::Tensor>>> solo;
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
        ASSERT_TRUE(at::equal(batched[b][step].first, solo[s][step].first))
            << "logits of sequence " << s << " step " << step << " in a batch of " << members.size()
            << " differ from its solo run by " << MaxAbsDiff(batched[b][step].first, solo[s][step].first);
        ASSERT_TRUE(at::equal(batched[b][step].second, solo[s][step].second))
            << "trace of sequence " << s << " step " << step << " in a batch of " << members.size();
      }
    }
  }
}

TEST_P(ForwardStepTest, TraceIsTheSoftmaxOfScaledQueryKeyProducts) {
  const auto tokens = RandomTokens(40, 30, config_.vocab_size);
  const std::span<const int32_t> all(tokens);
  KvCache cache(config_);
  model_.Prefill(all.first(39), cache);
  KvCache* caches[] = {&cache};
  AttentionTrace trace;
  trace.layer = 0;
  const torch::Tensor logits = model_.Decode(all.subspan(39), caches, &trace);
  EXPECT_LT(MaxAbsDiff(logits[0], model_.Forward(tokens, /*last_only=*/true)), 1e-4);
  // Layer 0's attention of position 39 recomputed with the libtorch stages: its input is just the
  // token's embedding, and the keys are the ones the step left in the cache.
  const BlockWeights& block = model_.weights().blocks[0];
  const torch::Tensor h = Embed(model_.weights(), at::tensor({int64_t{tokens[39]}}, at::kLong));  // [1, C]
  const QueryKeyValue qkv = ProjectQkv(config_, block, RmsNorm(h, block.ln1), RopeTable(config_).narrow(0, 39, 1));
  torch::Tensor probs;  // [H, 1, 40]
  Attend(qkv.q, cache.Keys(0, 40), cache.Values(0, 40), torch::Tensor(), &probs);
  ASSERT_EQ(trace.rows[0].sizes(), (at::IntArrayRef{config_.heads, 40}));
  EXPECT_LT(MaxAbsDiff(trace.rows[0], probs.squeeze(1)), 1e-5);
  EXPECT_GT(trace.rows[0].max().item<float>(), 2.0f / 40) << "attention is not uniform";
}

TEST_P(ForwardStepTest, RejectsBadTokensAndFullCachesWithoutTouchingThem) {
  KvCache cache(config_), full(config_);
  model_.Prefill(RandomTokens(7, 40, config_.vocab_size), cache);
  model_.Prefill(RandomTokens(config_.context, 41, config_.vocab_size), full);
  KvCache* one[] = {&cache};
  const int32_t bad[] = {static_cast<int32_t>(config_.vocab_size)};
  const int32_t negative[] = {-1};
  EXPECT_THROW(model_.Decode(bad, one), c10::Error);
  EXPECT_THROW(model_.Decode(negative, one), c10::Error);
  KvCache* both[] = {&cache, &full};
  const int32_t two[] = {1, 2};
  EXPECT_THROW(model_.Decode(two, both), c10::Error);
  KvCache* twice[] = {&cache, &cache};
  EXPECT_THROW(model_.Decode(two, twice), c10::Error);
  EXPECT_EQ(cache.length(), 7);
  EXPECT_EQ(full.length(), config_.context);
}

INSTANTIATE_TEST_SUITE_P(WidthsHeadsThreads, ForwardStepTest,
                         ::testing::Combine(::testing::Values(int64_t{144}), ::testing::Values(int64_t{2}),
                                            ::testing::Values(1, 2, 3)));
INSTANTIATE_TEST_SUITE_P(NarrowHeads, ForwardStepTest,
                         ::testing::Combine(::testing::Values(int64_t{80}), ::testing::Values(int64_t{4}),
                                            ::testing::Values(1, 2)));

}  // namespace
}  // namespace niels::daemon::model
