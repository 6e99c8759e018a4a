#include "daemon/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>


namespace niels::daemon::sampling {
namespace {

using common::StatusCode;

// Deterministic random logits in [-4, 4] from the test's own generator.
std::vector<float> RandomLogits(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> logits(n);
  for (float& x : logits) x = dist(gen);
  return logits;
}

int32_t NaiveArgmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

SamplingParams Params(float temperature, int32_t top_k, float top_p, uint64_t seed = 42) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

TEST(SamplerTest, TemperatureZeroIsArgmax) {
  Sampler sampler(Params(0.0f, 50, 0.0f));
  for (uint32_t s = 0; s < 50; ++s) {
    const std::vector<float> logits = RandomLogits(300, s);
    EXPECT_EQ(sampler.Sample(logits, {}), NaiveArgmax(logits)) << "seed " << s;
  }
}

TEST(SamplerTest, TopK1IsArgmaxAtTemperature1) {
  Sampler sampler(Params(1.0f, 1, 0.0f));
  for (uint32_t s = 0; s < 200; ++s) {
    const std::vector<float> logits = RandomLogits(64, 1000 + s);
    ASSERT_EQ(sampler.Sample(logits, {}), NaiveArgmax(logits)) << "draw " << s;
  }
}

TEST(SamplerTest, TopKLeavesExactlyKCandidates) {
  // Five ids share the largest logit; twenty others are only slightly lower, so without top-k
  // they would be drawn often.
  std::vector<float> logits(25, 0.95f);
  const std::set<int32_t> top = {2, 7, 11, 19, 24};
  for (int32_t id : top) logits[id] = 1.0f;
  Sampler sampler(Params(1.0f, 5, 0.0f, 9));
  std::map<int32_t, int> counts;
  for (int i = 0; i < 1000; ++i) ++counts[sampler.Sample(logits, {})];
  std::set<int32_t> drawn;
  for (const auto& [id, n] : counts) drawn.insert(id);
  EXPECT_EQ(drawn, top);
  for (int32_t id : top) EXPECT_GT(counts[id], 120) << id;  // flat over 5: about 200 each

  // Without top-k the other ids do occur (the check above can fail).
  Sampler off(Params(1.0f, 0, 0.0f, 9));
  std::set<int32_t> drawn_off;
  for (int i = 0; i < 1000; ++i) drawn_off.insert(off.Sample(logits, {}));
  EXPECT_GT(drawn_off.size(), top.size());

  // Non-flat logits: the distribution holds exactly k ids, the k largest.
  const std::vector<float> random = RandomLogits(200, 77);
  const auto dist = SamplingDistribution(random, {}, Params(0.7f, 13, 0.0f));
  ASSERT_EQ(dist.size(), 13u);
  std::vector<float> sorted = random;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  for (const auto& c : dist) EXPECT_GE(random[c.id], sorted[12]);
}

TEST(SamplerTest, TopPWhereFirstTokenReachesPKeepsOnlyIt) {
  // Softmax of {2, 1, 0, 0}: p0 = e^2 / (e^2 + e + 2) ~ 0.638.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 0.0f};
  const double p0 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0) + 2.0);
  ASSERT_GT(p0, 0.6);
  Sampler sampler(Params(1.0f, 0, 0.6f, 3));
  for (int i = 0; i < 500; ++i) ASSERT_EQ(sampler.Sample(logits, {}), 1);

  // Just above p0 the second token is needed too, and is drawn.
  Sampler wider(Params(1.0f, 0, static_cast<float>(p0 + 0.01), 3));
  std::set<int32_t> drawn;
  for (int i = 0; i < 500; ++i) drawn.insert(wider.Sample(logits, {}));
  EXPECT_EQ(drawn, (std::set<int32_t>{1, 2}));
}

// Naive reference of the whole pipeline for temperature > 0, written independently: full softmax,
// sort, top-k, renormalise, nucleus cut, renormalise.
std::map<int32_t, double> NaiveDistribution(std::vector<float> logits, const SamplingParams& p) {
  for (int32_t id : p.banned_ids) logits[id] = -INFINITY;
  std::vector<std::pair<double, int32_t>> v;
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
    if (std::isfinite(logits[i])) v.push_back({std::exp(logits[i] / p.temperature), i});
  }
  std::sort(v.begin(), v.end(), [](auto a, auto b) { return a.first > b.first; });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < v.size()) v.resize(p.top_k);
  double sum = 0;
  for (auto& e : v) sum += e.first;
  for (auto& e : v) e.first /= sum;
  if (p.top_p > 0) {
    double cum = 0;
    size_t keep = 0;
    while (keep < v.size() && cum < p.top_p) cum += v[keep++].first;
    v.resize(keep);
    sum = 0;
    for (auto& e : v) sum += e.first;
    for (auto& e : v) e.first /= sum;
  }
  std::map<int32_t, double> out;
  for (auto& e : v) out[e.second] = e.first;
  return out;
}

TEST(SamplerTest, DistributionMatchesNaiveReference) {
  const std::vector<float> logits = RandomLogits(120, 5);
  for (const auto& p : {Params(0.8f, 0, 0.0f), Params(1.3f, 20, 0.0f), Params(0.5f, 0, 0.9f),
                        Params(1.0f, 40, 0.7f)}) {
    SamplingParams params = p;
    params.banned_ids = {NaiveArgmax(logits), 3};
    const std::map<int32_t, double> expected = NaiveDistribution(logits, params);
    const auto dist = SamplingDistribution(logits, {}, params);
    ASSERT_EQ(dist.size(), expected.size());
    for (size_t i = 0; i < dist.size(); ++i) {
      ASSERT_TRUE(expected.count(dist[i].id)) << dist[i].id;
      EXPECT_NEAR(dist[i].prob, expected.at(dist[i].id), 1e-6);
      if (i > 0) {
        EXPECT_GE(dist[i - 1].prob, dist[i].prob);
      }
    }
  }
}

TEST(SamplerTest, DrawFrequenciesFollowTheDistribution) {
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  Sampler sampler(Params(1.0f, 0, 0.0f, 11));
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[sampler.Sample(logits, {})];
  for (int id = 0; id < 4; ++id) EXPECT_NEAR(counts[id] / double(n), 0.1 * (id + 1), 0.015) << id;
}

TEST(SamplerTest, BannedIdsAreNeverDrawn) {
  std::vector<float> logits(16, 0.0f);
  logits[4] = 5.0f;  // the favourite, banned
  SamplingParams params = Params(1.5f, 0, 0.0f, 1);
  params.banned_ids = {4, 0, 9, 15};
  Sampler sampler(params);
  std::set<int32_t> drawn;
  for (int i = 0; i < 1000; ++i) {
    const int32_t id = sampler.Sample(logits, {});
    ASSERT_TRUE(id != 4 && id != 0 && id != 9 && id != 15) << id;
    drawn.insert(id);
  }
  EXPECT_EQ(drawn.size(), 12u);
  params.temperature = 0.0f;
  EXPECT_NE(Sampler(params).Sample(logits, {}), 4);
}

// An allowed mask (structured output) acts exactly like banning every id outside it: the same
// distribution and, with the same seed, the same draws -- greedy, top-k, top-p and the repetition
// penalty included; ids outside the mask are never drawn; the fallback when nothing is selectable
// is the first allowed, unbanned id.
TEST(SamplerTest, AllowedMaskEqualsBanningTheRest) {
  constexpr int kVocab = 300;  // not a multiple of 64
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<uint64_t> mask((kVocab + 63) / 64, 0);
    const int density = 1 + trial % 5;  // 1/5 .. all of the ids
    for (int32_t id = 0; id < kVocab; ++id) {
      if (static_cast<int>(rng() % 5) < density || id == 200) mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (trial % 7 == 0) mask[0] = mask[1] = 0;  // whole words out
    std::vector<int32_t> outside;
    for (int32_t id = 0; id < kVocab; ++id) {
      if (!((mask[id >> 6] >> (id & 63)) & 1)) outside.push_back(id);
    }
    SamplingParams masked = Params(trial % 4 == 0 ? 0.0f : 1.0f, trial % 3 == 0 ? 0 : 20, trial % 2 ? 0.9f : 0.0f,
                                   100 + trial);
    masked.repetition_penalty = trial % 5 == 0 ? 1.3f : 1.0f;
    masked.banned_ids = {1, 2};
    SamplingParams banned = masked;
    banned.banned_ids.insert(banned.banned_ids.end(), outside.begin(), outside.end());
    const std::vector<float> logits = RandomLogits(kVocab, 1000 + trial);
    const std::vector<int32_t> history = {5, 9, 77};
    const auto want = SamplingDistribution(logits, history, banned);
    const auto got = SamplingDistribution(logits, history, masked, mask);
    ASSERT_EQ(got.size(), want.size()) << trial;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].id, want[i].id) << trial;
      EXPECT_EQ(got[i].prob, want[i].prob) << trial;
    }
    Sampler a(masked), b(banned);
    for (int step = 0; step < 50; ++step) {
      const int32_t id = a.Sample(logits, history, mask);
      EXPECT_EQ(id, b.Sample(logits, history)) << trial;
      EXPECT_TRUE((mask[id >> 6] >> (id & 63)) & 1) << trial;
    }
  }
  // Nothing selectable (every allowed logit -inf): the first allowed id that is not banned.
  std::vector<float> none(kVocab, -std::numeric_limits<float>::infinity());
  std::vector<uint64_t> mask((kVocab + 63) / 64, 0);
  mask[0] = (uint64_t{1} << 3) | (uint64_t{1} << 9);
  SamplingParams p = Params(1.0f, 0, 0.0f);
  p.banned_ids = {3};
  EXPECT_EQ(Sampler(p).Sample(none, {}, mask), 9);
  p.temperature = 0.0f;
  EXPECT_EQ(Sampler(p).Sample(none, {}, mask), 9);
  // An id biased by -inf is not the fallback either.
  p.banned_ids = {};
  p.logit_bias = {{3, -std::numeric_limits<float>::infinity()}};
  EXPECT_EQ(SamplingDistribution(none, {}, p, mask).front().id, 9);
  p.temperature = 1.0f;
  EXPECT_EQ(SamplingDistribution(none, {}, p, mask).front().id, 9);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, -0.25f};
  const std::vector<int32_t> history = {0, 1, 1, 4, 4, 4, 99, -1};  // repeats count once
  ApplyRepetitionPenalty(logits, history, 2.0f);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 1.0f, 0.5f, -0.5f}));

  std::vector<float> unchanged = {2.0f, -2.0f};
  ApplyRepetitionPenalty(unchanged, history, 1.0f);
  EXPECT_EQ(unchanged, (std::vector<float>{2.0f, -2.0f}));
}

TEST(SamplerTest, RepetitionPenaltyFlipsGreedyChoice) {
  SamplingParams params = Params(0.0f, 0, 0.0f);
  params.repetition_penalty = 2.0f;
  Sampler sampler(params);
  // Positive: 3 / 2 = 1.5 < 2, so id 1 wins once id 0 was seen.
  const std::vector<float> positive = {3.0f, 2.0f};
  EXPECT_EQ(sampler.Sample(positive, {}), 0);
  const std::vector<int32_t> seen0 = {0};
  EXPECT_EQ(sampler.Sample(positive, seen0), 1);
  // Negative: -1 * 2 = -2 < -1.5, so id 1 wins; dividing would have kept id 0 ahead.
  const std::vector<float> negative = {-1.0f, -1.5f};
  EXPECT_EQ(sampler.Sample(negative, {}), 0);
  EXPECT_EQ(sampler.Sample(negative, seen0), 1);
  // 3 / 1.4 ~ 2.14 > 2: a smaller penalty keeps id 0.
  params.repetition_penalty = 1.4f;
  EXPECT_EQ(Sampler(params).Sample(positive, seen0), 0);
}

std::vector<int32_t> Draw100(uint64_t seed) {
  SamplingParams params = Params(1.0f, 50, 0.95f, seed);
  params.repetition_penalty = 1.1f;
  Sampler sampler(params);
  std::vector<int32_t> out;
  for (uint32_t step = 0; step < 100; ++step) {
    out.push_back(sampler.Sample(RandomLogits(500, step) , out));
  }
  return out;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  const std::vector<int32_t> a = Draw100(123);
  EXPECT_EQ(a, Draw100(123));
  EXPECT_NE(a, Draw100(124));
}

TEST(SamplerTest, ValidationErrorsNameTheField) {
  struct Case {
    SamplingParams params;
    const char* field;  // nullptr = valid
  };
  auto with = [](auto edit) {
    SamplingParams p;
    edit(p);
    return p;
  };
  const std::vector<Case> cases = {
      {SamplingParams{}, nullptr},
      {with([](auto& p) { p.temperature = 0.0f; p.top_p = 1.0f; p.top_k = 0; }), nullptr},
      {with([](auto& p) { p.temperature = -0.1f; }), "temperature"},
      {with([](auto& p) { p.temperature = INFINITY; }), "temperature"},
      {with([](auto& p) { p.temperature = NAN; }), "temperature"},
      {with([](auto& p) { p.top_k = -1; }), "top_k"},
      {with([](auto& p) { p.top_p = -0.01f; }), "top_p"},
      {with([](auto& p) { p.top_p = 1.01f; }), "top_p"},
      {with([](auto& p) { p.top_p = NAN; }), "top_p"},
      {with([](auto& p) { p.repetition_penalty = 0.0f; }), "repetition_penalty"},
      {with([](auto& p) { p.repetition_penalty = -1.0f; }), "repetition_penalty"},
      {with([](auto& p) { p.banned_ids = {10}; }), "banned_ids"},
      {with([](auto& p) { p.banned_ids = {-1}; }), "banned_ids"},
      {with([](auto& p) { p.banned_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; }), "banned_ids"},
      {with([](auto& p) { p.banned_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 8}; }), nullptr},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const common::Status s = ValidateSamplingParams(cases[i].params, 10);
    if (cases[i].field == nullptr) {
      EXPECT_TRUE(s.ok()) << i << ": " << s.ToString();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << i;
      EXPECT_NE(s.message().find(cases[i].field), std::string::npos) << i << ": " << s.message();
    }
  }
}

// Logit bias: the naive reference adds each bias to its logit by hand (the same float sum), then
// runs the rest of the pipeline as NaiveDistribution does.
std::vector<float> NaiveBiased(std::vector<float> logits, const std::vector<TokenBias>& bias) {
  for (const TokenBias& b : bias) logits[b.id] = b.bias == -INFINITY ? -INFINITY : logits[b.id] + b.bias;
  return logits;
}

TEST(SamplerTest, LogitBiasAddsToItsIdsOnlyAndSaturates) {
  const std::vector<float> logits = RandomLogits(50, 8);
  const std::vector<TokenBias> bias = {{3, 2.5f}, {7, -1.25f}, {11, -INFINITY}, {49, 100.0f}, {0, -100.0f}};
  std::vector<float> biased = logits;
  ApplyLogitBias(biased, bias);
  const std::vector<float> expected = NaiveBiased(logits, bias);
  for (int32_t id = 0; id < 50; ++id) EXPECT_EQ(biased[id], expected[id]) << id;  // bitwise
  EXPECT_EQ(biased[11], -INFINITY);
  EXPECT_EQ(biased[4], logits[4]);
  // A finite bias never makes a finite logit infinite; ids outside the row are ignored.
  constexpr float kMax = std::numeric_limits<float>::max();
  std::vector<float> edge = {kMax, -kMax, 1.0f};
  ApplyLogitBias(edge, std::vector<TokenBias>{{0, kMax}, {1, -kMax}, {2, 1.0f}, {3, 5.0f}, {-1, 5.0f}});
  EXPECT_EQ(edge, (std::vector<float>{kMax, -kMax, 2.0f}));
}

// The distribution a biased step draws from is the naive one of the biased logits, for every
// temperature, top-k and top-p; a -inf bias is a ban; greedy takes the argmax of the biased logits.
TEST(SamplerTest, DistributionWithLogitBiasMatchesNaiveReferenceOfTheBiasedLogits) {
  const std::vector<float> logits = RandomLogits(120, 15);
  const int32_t best = NaiveArgmax(logits);
  const int32_t low = static_cast<int32_t>(std::min_element(logits.begin(), logits.end()) - logits.begin());
  const std::vector<TokenBias> bias = {{low, 9.0f}, {best, -INFINITY}, {5, 1.5f}, {6, -3.0f}, {70, 0.25f}};
  for (const auto& p : {Params(1.0f, 0, 0.0f), Params(0.8f, 0, 0.0f), Params(1.3f, 20, 0.0f), Params(0.5f, 0, 0.9f),
                        Params(1.0f, 40, 0.7f)}) {
    SamplingParams params = p;
    params.logit_bias = bias;
    params.banned_ids = {9};
    SamplingParams naive = p;
    naive.banned_ids = {9};
    const std::map<int32_t, double> expected = NaiveDistribution(NaiveBiased(logits, bias), naive);
    const auto dist = SamplingDistribution(logits, {}, params);
    ASSERT_EQ(dist.size(), expected.size());
    for (const auto& c : dist) {
      ASSERT_TRUE(expected.count(c.id)) << c.id;
      EXPECT_NEAR(c.prob, expected.at(c.id), 1e-6) << c.id;
      EXPECT_NE(c.id, best) << "biased by -inf";
    }
    EXPECT_EQ(dist.front().id, low) << "the +9 bias makes the lowest logit the most likely";
    Sampler sampler(params);
    for (int i = 0; i < 300; ++i) ASSERT_NE(sampler.Sample(logits, {}), best);
    // The Sampler counts the -inf id among its banned ids.
    EXPECT_EQ(sampler.params().banned_ids, (std::vector<int32_t>{std::min(best, 9), std::max(best, 9)}));
  }
  SamplingParams greedy = Params(0.0f, 0, 0.0f);
  greedy.logit_bias = bias;
  EXPECT_EQ(Sampler(greedy).Sample(logits, {}), NaiveArgmax(NaiveBiased(logits, bias)));
  EXPECT_EQ(Sampler(greedy).Sample(logits, {}), low);
}

// The bias comes before the repetition penalty: id 0's 2.0 biased by -1 is 1.0, penalised (/ 2) to
// 0.5; penalising first would give 2 / 2 - 1 = 0.
TEST(SamplerTest, LogitBiasIsAddedBeforeTheRepetitionPenalty) {
  const std::vector<float> logits = {2.0f, 0.7f};
  SamplingParams params = Params(1.0f, 0, 0.0f);
  params.repetition_penalty = 2.0f;
  params.logit_bias = {{0, -1.0f}};
  const std::vector<int32_t> history = {0};
  const auto dist = SamplingDistribution(logits, history, params);
  ASSERT_EQ(dist.size(), 2u);
  const double x1 = static_cast<double>(0.7f);
  const double p1 = std::exp(x1) / (std::exp(x1) + std::exp(0.5));
  EXPECT_EQ(dist[0].id, 1);
  EXPECT_NEAR(dist[0].prob, p1, 1e-9);
  EXPECT_NEAR(dist[1].prob, 1.0 - p1, 1e-9);
}

TEST(SamplerTest, InvalidLogitBiasIsRefusedNamingTheEntry) {
  constexpr int64_t kVocab = 10;
  EXPECT_TRUE(ValidateLogitBias(std::vector<TokenBias>{{0, 1.0f}, {9, -INFINITY}, {4, -1e30f}}, kVocab, "f").ok());
  EXPECT_TRUE(ValidateLogitBias({}, kVocab, "f").ok());
  auto message = [&](const std::vector<TokenBias>& bias) {
    const common::Status status = ValidateLogitBias(bias, kVocab, "sampling.logit_bias");
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    return status.message();
  };
  EXPECT_EQ(message({{0, 1.0f}, {10, 1.0f}}), "sampling.logit_bias[1]: id 10 is outside the vocabulary [0, 10)");
  EXPECT_EQ(message({{-1, 1.0f}}), "sampling.logit_bias[0]: id -1 is outside the vocabulary [0, 10)");
  EXPECT_NE(message({{1, 0.0f}, {2, NAN}}).find("sampling.logit_bias[1]: the bias must be finite or -inf"),
            std::string::npos);
  EXPECT_NE(message({{1, INFINITY}}).find("sampling.logit_bias[0]: the bias must be finite or -inf"),
            std::string::npos);
  EXPECT_EQ(message({{5, 1.0f}, {3, 1.0f}, {3, 2.0f}, {5, 0.0f}}),
            "sampling.logit_bias[2]: id 3 already has a bias (sampling.logit_bias[1])");
  std::vector<TokenBias> many;
  for (int32_t id = 0; id <= kVocab; ++id) many.push_back({id % 10, 1.0f});
  EXPECT_EQ(message(many), "sampling.logit_bias: 11 entries (the limit is the vocabulary size, 10)");
  // Every id banned, by -inf biases and banned_ids together: refused like banning them all.
  SamplingParams params = Params(1.0f, 0, 0.0f);
  for (int32_t id = 0; id < 6; ++id) params.logit_bias.push_back({id, -INFINITY});
  params.banned_ids = {6, 7, 8};
  EXPECT_TRUE(ValidateSamplingParams(params, kVocab).ok());
  params.banned_ids.push_back(9);
  EXPECT_NE(ValidateSamplingParams(params, kVocab).message().find("every one of the 10 ids is banned"), std::string::npos);
  params.banned_ids = {};
  params.logit_bias.push_back({3, 1.0f});
  EXPECT_NE(ValidateSamplingParams(params, kVocab).message().find("logit_bias[6]: id 3 already has a bias"), std::string::npos);
}

}  // namespace
}  // namespace niels::daemon::sampling
