// TokenIdSet: the distinct ids ascending, membership by binary search; and the Sampler built from a
// banned list with repeats samples exactly as from its distinct ids.
#include "daemon/sampling/token_id_set.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/sampling/sampler.h"

namespace niels::daemon::sampling {
namespace {

TEST(TokenIdSetTest, HoldsTheDistinctIdsAscendingAndAnswersMembership) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int32_t> ids;
    const int n = trial * 37;
    for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(rng() % 500) - 20);  // repeats, negatives
    if (trial % 3 == 0) std::sort(ids.begin(), ids.end());                         // already ascending
    const std::set<int32_t> want(ids.begin(), ids.end());
    const TokenIdSet set(ids);
    ASSERT_EQ(set.size(), want.size());
    EXPECT_TRUE(std::equal(set.ids().begin(), set.ids().end(), want.begin(), want.end()));
    for (int32_t id = -30; id < 500; ++id) EXPECT_EQ(set.Contains(id), want.count(id) == 1) << id;
  }
  EXPECT_TRUE(TokenIdSet().empty());
  EXPECT_FALSE(TokenIdSet().Contains(0));
  const TokenIdSet listed{9, 2, 9, 5};
  EXPECT_EQ(std::vector<int32_t>(listed.ids().begin(), listed.ids().end()), (std::vector<int32_t>{2, 5, 9}));
}

TEST(TokenIdSetTest, SamplerWithRepeatedBannedIdsDrawsAsWithTheDistinctOnes) {
  constexpr int kVocab = 200;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = dist(rng);
  SamplingParams distinct;
  distinct.temperature = 1.0f;
  distinct.top_k = 0;
  distinct.seed = 5;
  for (int32_t id = 0; id < kVocab; id += 3) distinct.banned_ids.push_back(id);
  SamplingParams repeated = distinct;
  repeated.banned_ids.clear();
  for (int copy = 0; copy < 4; ++copy) {  // four copies, descending: kVocab x 4 / 3 entries
    for (auto it = distinct.banned_ids.rbegin(); it != distinct.banned_ids.rend(); ++it) repeated.banned_ids.push_back(*it);
  }
  ASSERT_TRUE(ValidateSamplingParams(repeated, kVocab).ok());
  Sampler a(distinct), b(repeated);
  EXPECT_EQ(b.params().banned_ids, distinct.banned_ids);  // made distinct and ascending once
  for (int step = 0; step < 200; ++step) {
    const int32_t id = a.Sample(logits, {});
    ASSERT_EQ(b.Sample(logits, {}), id) << step;
    ASSERT_NE(id % 3, 0) << id;
  }
}

}  // namespace
}  // namespace niels::daemon::sampling
