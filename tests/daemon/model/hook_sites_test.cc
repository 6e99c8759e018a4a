// Hook sites (daemon/model/hook_sites.h): the site-name parser, and the activations ForwardStep
// hands an observer -- equal to the scalar reference's at every site, layer and position (random
// f32 niels_gpt, Llama and Qwen3 models; prompt positions included, through prefill chunks and
// decode steps), bitwise the same alone and batched, and never changing a result.

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/budgets.h"
#include "daemon/model/hook_sites.h"
#include "daemon/model/tensor_statistics.h"
#include "daemon/model/transformer.h"
#include "tests/daemon/model/model_test_util.h"
#include "tests/daemon/model/scalar_reference.h"

namespace niels::daemon::model {
namespace {
namespace hook_sites_test {

using Key = std::tuple<int, int64_t, int64_t>;  // site, layer, position

// Keeps every observed vector; a second observation of one key is recorded as a failure.
class Recorder final : public ActivationObserver {
 public:
  explicit Recorder(HookSelection sites) : sites_(std::move(sites)) {}
  const HookSelection& sites() const override { return sites_; }
  void Observe(HookSite site, int64_t layer, int64_t position, std::span<const float> values) override {
    EXPECT_TRUE(sites_.Has(site, layer)) << HookSiteName(site, layer);
    const Key key{static_cast<int>(site), layer, position};
    EXPECT_EQ(seen.count(key), 0u) << HookSiteName(site, layer) << " at " << position << " twice";
    seen[key].assign(values.begin(), values.end());
  }
  std::map<Key, std::vector<float>> seen;

 private:
  HookSelection sites_;
};

HookSelection Parse(std::vector<std::string> patterns, int64_t layers) {
  auto parsed = ParseHookSites(patterns, layers, "probes.sites");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? *parsed : HookSelection(layers);
}

common::Status ParseError(std::vector<std::string> patterns, int64_t layers) {
  auto parsed = ParseHookSites(patterns, layers, "probes.sites");
  return parsed.ok() ? common::Status::Ok() : parsed.status();
}

TEST(HookSiteNamesTest, NamesFollowTransformerLens) {
  EXPECT_EQ(HookSiteName(HookSite::kResidPre, 3), "blocks.3.hook_resid_pre");
  EXPECT_EQ(HookSiteName(HookSite::kAttnOut, 0), "blocks.0.hook_attn_out");
  EXPECT_EQ(HookSiteName(HookSite::kResidMid, 1), "blocks.1.hook_resid_mid");
  EXPECT_EQ(HookSiteName(HookSite::kMlpPost, 2), "blocks.2.mlp.hook_post");
  EXPECT_EQ(HookSiteName(HookSite::kMlpOut, 10), "blocks.10.hook_mlp_out");
  EXPECT_EQ(HookSiteName(HookSite::kResidPost, 27), "blocks.27.hook_resid_post");
  EXPECT_EQ(HookSiteName(HookSite::kLnFinalNormalized, -1), "ln_final.hook_normalized");
  EXPECT_EQ(HookSiteCount(28), 169);
}

TEST(HookSiteParserTest, ExactNamesAndGlobs) {
  const HookSelection one = Parse({"blocks.3.hook_resid_post"}, 12);
  EXPECT_EQ(one.count(), 1);
  EXPECT_TRUE(one.Has(HookSite::kResidPost, 3));
  EXPECT_FALSE(one.Has(HookSite::kResidPost, 2));
  EXPECT_EQ(Parse({"blocks.*.hook_resid_post"}, 12).count(), 12);
  const HookSelection block3 = Parse({"blocks.3.*"}, 12);
  EXPECT_EQ(block3.count(), 6);
  EXPECT_TRUE(block3.Has(HookSite::kMlpPost, 3));
  EXPECT_EQ(Parse({"blocks.1*"}, 12).count(), 18);  // blocks.1., blocks.10., blocks.11.
  EXPECT_EQ(Parse({"*"}, 12).count(), HookSiteCount(12));
  EXPECT_EQ(Parse({"*hook_post"}, 12).count(), 12);  // mlp.hook_post only
  const HookSelection final_only = Parse({"ln_final.hook_normalized"}, 12);
  EXPECT_TRUE(final_only.Has(HookSite::kLnFinalNormalized, -1));
  // Overlapping patterns select each site once.
  EXPECT_EQ(Parse({"blocks.0.*", "blocks.*.hook_resid_pre", "blocks.0.hook_resid_pre"}, 4).count(), 6 + 3);
  std::vector<std::pair<HookSite, int64_t>> order;
  Parse({"ln_final.*", "blocks.1.hook_attn_out", "blocks.0.hook_mlp_out"}, 2)
      .ForEach([&](HookSite site, int64_t layer) { order.emplace_back(site, layer); });
  const std::vector<std::pair<HookSite, int64_t>> forward = {
      {HookSite::kMlpOut, 0}, {HookSite::kAttnOut, 1}, {HookSite::kLnFinalNormalized, -1}};
  EXPECT_EQ(order, forward);
}

TEST(HookSiteParserTest, RefusalsNameTheFieldAndTheBudget) {
  const auto expect_invalid = [](const common::Status& status, const std::string& part) {
    EXPECT_EQ(status.code(), common::StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(part), std::string::npos) << status.message();
  };
  expect_invalid(ParseError({"blocks.0.hook_resid_pre", "blocks.0.hook_nope"}, 4), "probes.sites[1]: unknown");
  expect_invalid(ParseError({"blocks.4.hook_resid_pre"}, 4), "probes.sites[0]: layer 4");
  expect_invalid(ParseError({"blocks.99999999999999999999999.hook_resid_pre"}, 4), "out of range");
  expect_invalid(ParseError({"blocks.01.hook_resid_pre"}, 4), "unknown");
  expect_invalid(ParseError({"blocks.-1.hook_resid_pre"}, 4), "unknown");
  expect_invalid(ParseError({"hook_resid_pre"}, 4), "unknown");
  expect_invalid(ParseError({"blocks.0.hook_resid_pre."}, 4), "unknown");
  expect_invalid(ParseError({""}, 4), "probes.sites[0]: empty");
  expect_invalid(ParseError({"blocks.7.*"}, 4), "probes.sites[0]: 'blocks.7.*' matches no hook site");
  const std::vector<std::string> many(common::kProbeSitePatternsLimit + 1, "blocks.0.hook_resid_pre");
  expect_invalid(ParseError(many, 4), "(budget probe_site_patterns)");
  const std::vector<std::string> enough(common::kProbeSitePatternsLimit, "blocks.0.hook_resid_pre");
  EXPECT_TRUE(ParseError(enough, 4).ok());
  expect_invalid(ParseError({std::string(common::kProbeSitePatternBytesLimit + 1, '*')}, 4),
                 "(budget probe_site_pattern_bytes)");
  EXPECT_TRUE(ParseError({std::string(common::kProbeSitePatternBytesLimit, '*')}, 4).ok());
  // 200 blocks: 1201 sites, more than the limit of 1024 at once.
  expect_invalid(ParseError({"*"}, 200), "(budget probe_sites)");
  EXPECT_TRUE(ParseError({"blocks.*.hook_resid_post"}, 200).ok());
}

TEST(HookSiteParserTest, WorkStaysWithinItsBound) {
  const std::vector<std::vector<std::string>> cases = {
      {"*"}, {"blocks.*.hook_resid_post", "blocks.3.*"}, {std::string(64, '*') + "x"},
      {"*a*b*c*d*e*f*g*h*i*j*k*l*m*n*o*p*q*r*s*t*u*v*w*x*y*z"}, {"blocks.1.hook_attn_out"}};
  for (const auto& patterns : cases) {
    uint64_t work = 0;
    (void)ParseHookSites(patterns, 48, "sites", &work);
    EXPECT_LE(work, HookPatternWorkBound(patterns, 48)) << patterns[0];
  }
  EXPECT_EQ(HookPatternWorkBound(std::vector<std::string>{"blocks.0.hook_mlp_out"}, 48), 0u);  // no glob
}

struct Member {
  std::string name;
  ModelConfig config;
  bool fused_qkv = false;
};

void PrintTo(const Member& m, std::ostream* os) { *os << m.name; }

ModelConfig Small() {
  ModelConfig c;
  c.vocab_size = 64;
  c.context = 40;
  c.width = 32;
  c.layers = 3;
  c.heads = 4;
  c.d_ff = 48;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  return c;
}

std::vector<Member> Members() {
  ModelConfig llama = Small();
  llama.architecture = Architecture::kLlama;
  llama.kv_heads = 2;
  llama.rope_pairs = RopePairs::kHalves;
  llama.rope_theta = 500000.0;
  llama.rms_norm_eps = 1e-6;
  llama.mlp_bias = false;
  llama.tied_embeddings = false;
  ModelConfig qwen3 = Small();
  qwen3.architecture = Architecture::kQwen3;
  qwen3.kv_heads = 2;
  qwen3.head_size = 16;
  qwen3.rope_pairs = RopePairs::kHalves;
  qwen3.rope_theta = 1000000.0;
  qwen3.rms_norm_eps = 1e-6;
  qwen3.qk_norm = true;
  qwen3.mlp_bias = false;
  qwen3.tied_embeddings = false;
  return {{"niels_gpt", Small(), /*fused_qkv=*/true}, {"llama", llama}, {"qwen3", qwen3}};
}

double Rms(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += static_cast<double>(x) * x;
  return std::sqrt(sum / static_cast<double>(v.size()));
}

class HookSitesModelTest : public ::testing::TestWithParam<Member> {};

// Every site of every layer at every position, from prefill chunks and decode steps, against the
// scalar reference's values at that site: each value and each statistic within 1e-5 x the
// reference vector's RMS (the l2 norm relative to itself).
TEST_P(HookSitesModelTest, EverySiteEqualsTheScalarReference) {
  const Member& m = GetParam();
  const ModelConfig& c = m.config;
  const Transformer model(c, RandomWeights(c, 17, 0.2, m.fused_qkv));
  const std::vector<int32_t> tokens = RandomTokens(20, 3, c.vocab_size);
  Recorder recorder(Parse({"*"}, c.layers));
  KvCache cache(c);
  const std::span<const int32_t> all(tokens);
  const auto step = [&](std::span<const int32_t> part) {
    const SequenceInput input{.cache = &cache, .tokens = part, .observer = &recorder};
    model.Step(std::span(&input, 1));
  };
  step(all.first(9));            // a prefill chunk
  step(all.subspan(9, 6));       // another
  for (int64_t p = 15; p < 20; ++p) step(all.subspan(p, 1));  // decode steps
  std::map<Key, std::vector<float>> expected;
  const ScalarReference::Hook hook = [&](HookSite site, int64_t layer, int64_t position, const std::vector<float>& v) {
    expected[{static_cast<int>(site), layer, position}] = v;
  };
  ScalarReference(c, model.weights()).Forward(tokens, -1, nullptr, &hook);
  ASSERT_EQ(expected.size(), static_cast<size_t>(HookSiteCount(c.layers) * 20));
  ASSERT_EQ(recorder.seen.size(), expected.size());
  double worst = 0;  // the largest difference relative to the RMS
  for (const auto& [key, want] : expected) {
    const auto found = recorder.seen.find(key);
    ASSERT_NE(found, recorder.seen.end());
    const std::vector<float>& got = found->second;
    const std::string where = HookSiteName(static_cast<HookSite>(std::get<0>(key)), std::get<1>(key)) + " at " +
                              std::to_string(std::get<2>(key));
    ASSERT_EQ(got.size(), want.size()) << where;
    ASSERT_EQ(got.size(), static_cast<size_t>(std::get<0>(key) == static_cast<int>(HookSite::kMlpPost) ? c.d_ff : c.width));
    const double rms = Rms(want);
    ASSERT_GT(rms, 0.0) << where;
    const double tolerance = 1e-5 * rms;
    EXPECT_LE(MaxAbsDiff(got, want), tolerance) << where;
    worst = std::max(worst, MaxAbsDiff(got, want) / rms);
    const TensorStatistics a = ComputeStatistics(got, true), b = ComputeStatistics(want, true);
    EXPECT_NEAR(a.mean, b.mean, tolerance) << where;
    EXPECT_NEAR(a.std, b.std, tolerance) << where;
    EXPECT_NEAR(a.min, b.min, tolerance) << where;
    EXPECT_NEAR(a.max, b.max, tolerance) << where;
    EXPECT_NEAR(a.l2_norm, b.l2_norm, 1e-5 * b.l2_norm) << where;
    EXPECT_NEAR(a.median, b.median, tolerance) << where;
    EXPECT_NEAR(a.abs_mean, b.abs_mean, tolerance) << where;
    for (size_t i = 0; i < kPercentiles.size(); ++i) EXPECT_NEAR(a.percentiles[i], b.percentiles[i], tolerance) << where;
  }
  // Which site is which matters: resid_post of block l is resid_pre of block l + 1, and nothing else
  // coincides.
  const auto at = [&](HookSite site, int64_t layer) { return recorder.seen.at({static_cast<int>(site), layer, 5}); };
  EXPECT_EQ(at(HookSite::kResidPost, 0), at(HookSite::kResidPre, 1));
  EXPECT_NE(at(HookSite::kResidMid, 0), at(HookSite::kResidPre, 0));
  EXPECT_NE(at(HookSite::kResidMid, 0), at(HookSite::kResidPost, 0));
  std::cout << m.name << ": largest difference / RMS over all sites " << worst << "\n";
}

// A step's logits and keys are bitwise the same with every site observed and without, alone and
// batched; and a sequence's observations are bitwise the same alone and in a batch.
TEST_P(HookSitesModelTest, ObservingChangesNothingAndIsBatchInvariant) {
  const Member& m = GetParam();
  const ModelConfig& c = m.config;
  const Transformer model(c, RandomWeights(c, 23, 0.2, m.fused_qkv));
  const std::vector<int64_t> lengths = {11, 3, 17};
  struct Run {
    std::vector<float> logits;
    std::map<Key, std::vector<float>> seen;
  };
  // Prefills the three prompts in one step, then decodes 4 steps of all three; sequence 0 observed
  // when `observe`, alone when `alone`.
  const auto run = [&](bool observe, bool alone) {
    Recorder recorder(Parse({"*"}, c.layers));
    std::vector<KvCache> caches;
    std::vector<std::vector<int32_t>> prompts;
    const size_t count = alone ? 1 : lengths.size();
    for (size_t s = 0; s < count; ++s) {
      caches.emplace_back(c);
      prompts.push_back(RandomTokens(lengths[s], 40 + s, c.vocab_size));
    }
    Run out;
    std::vector<SequenceInput> inputs;
    for (size_t s = 0; s < count; ++s) {
      inputs.push_back({.cache = &caches[s], .tokens = prompts[s], .all_logits = true,
                        .observer = s == 0 && observe ? &recorder : nullptr});
    }
    std::vector<float> logits = model.Step(inputs);
    out.logits.assign(logits.begin(), logits.begin() + lengths[0] * c.vocab_size);  // sequence 0's rows
    for (int step = 0; step < 4; ++step) {
      const std::vector<int32_t> next = RandomTokens(3, 300 + step, c.vocab_size);
      for (size_t s = 0; s < count; ++s) {
        inputs[s].tokens = std::span(&next[s], 1);
        inputs[s].all_logits = false;
      }
      logits = model.Step(inputs);
      out.logits.insert(out.logits.end(), logits.begin(), logits.begin() + c.vocab_size);
    }
    out.seen = std::move(recorder.seen);
    return out;
  };
  const Run plain = run(false, false), observed = run(true, false), alone = run(true, true);
  const Run plain_alone = run(false, true);
  EXPECT_EQ(observed.logits, plain.logits);
  EXPECT_EQ(alone.logits, plain_alone.logits);
  EXPECT_EQ(alone.logits, plain.logits);
  EXPECT_TRUE(plain.seen.empty());
  EXPECT_EQ(observed.seen.size(), static_cast<size_t>(HookSiteCount(c.layers) * (lengths[0] + 4)));
  EXPECT_EQ(observed.seen, alone.seen);
}

// An observer sees exactly what it selects, and nothing of another sequence's rows.
TEST_P(HookSitesModelTest, EachRowSeesWhatItSelects) {
  const Member& m = GetParam();
  const ModelConfig& c = m.config;
  const Transformer model(c, RandomWeights(c, 29, 0.2, m.fused_qkv));
  Recorder first(Parse({"blocks.1.*", "ln_final.hook_normalized"}, c.layers));
  Recorder second(Parse({"blocks.*.mlp.hook_post"}, c.layers));
  KvCache a(c), b(c);
  const std::vector<int32_t> pa = RandomTokens(5, 1, c.vocab_size), pb = RandomTokens(2, 2, c.vocab_size);
  const SequenceInput inputs[] = {{.cache = &a, .tokens = pa, .observer = &first},
                                  {.cache = &b, .tokens = pb, .observer = &second}};
  model.Step(inputs);
  EXPECT_EQ(first.seen.size(), 7u * 5);
  EXPECT_EQ(second.seen.size(), static_cast<size_t>(c.layers) * 2);
  for (const auto& [key, values] : second.seen) {
    EXPECT_EQ(std::get<0>(key), static_cast<int>(HookSite::kMlpPost));
    EXPECT_LT(std::get<2>(key), 2);
    EXPECT_EQ(values.size(), static_cast<size_t>(c.d_ff));
  }
}

INSTANTIATE_TEST_SUITE_P(Members, HookSitesModelTest, ::testing::ValuesIn(Members()),
                         [](const ::testing::TestParamInfo<Member>& info) { return info.param.name; });

}  // namespace hook_sites_test
}  // namespace
}  // namespace niels::daemon::model
