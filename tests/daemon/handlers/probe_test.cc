// GenerateRequest.probes through the Service (wire request in, response out) on the tiny
// random-weight model: the statistics at every site and position equal the scalar reference's
// (tests/daemon/model/scalar_reference.h) within 1e-5 x each vector's RMS, per position and in
// total; the stream's activations join to the response's; a probed request gives bitwise the same
// ids and logprobs as without probes, alone and batched with seven others; bad specs are refused
// before any token, naming the field.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/budgets.h"
#include "daemon/model/hook_sites.h"
#include "daemon/model/tensor_statistics.h"
#include "daemon/handlers/probes.h"
#include "tests/daemon/handlers/service_fixture.h"
#include "tests/daemon/model/scalar_reference.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace probe_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 128;

std::string NewSession(Service& engine) {
  const v1::Response response = Call(engine, CreateRequest());
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

v1::Request Probed(const std::string& session, const std::vector<int32_t>& input, int new_tokens, bool full,
                   std::vector<std::string> sites = {"*"}) {
  v1::Request r = GenerateRequest(session, input, new_tokens);
  v1::GenerateRequest& g = *r.mutable_generate();
  g.mutable_sampling()->set_temperature(1.0f);
  g.mutable_sampling()->set_top_k(0);
  g.mutable_sampling()->set_seed(9);
  g.set_want_logprobs(true);
  g.set_top_logprobs(3);
  g.set_stream(true);
  for (const std::string& s : sites) g.mutable_probes()->add_sites(s);
  g.mutable_probes()->set_full(full);
  g.mutable_probes()->set_per_token(true);
  g.mutable_probes()->set_aggregate(true);
  return r;
}

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  bool operator==(const Outcome&) const = default;
};

Outcome OutcomeOf(const v1::Response& response) {
  Outcome o;
  EXPECT_TRUE(response.has_generate()) << response.DebugString().substr(0, 2000);
  o.ids.assign(response.generate().new_ids().begin(), response.generate().new_ids().end());
  for (const v1::StepInfo& step : response.generate().steps()) {
    o.logprobs.push_back(step.logprob());
    for (const v1::TokenAlternative& alt : step.top()) {
      o.logprobs.push_back(static_cast<float>(alt.id()));
      o.logprobs.push_back(alt.logprob());
    }
  }
  return o;
}

double Rms(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += static_cast<double>(x) * x;
  return std::sqrt(sum / static_cast<double>(v.size()));
}

// Compares a wire statistic with the reference's over the same values.
void ExpectStatsNear(const v1::TensorStats& got, const model::TensorStatistics& want, double rms, bool full,
                     const std::string& where) {
  const double tol = 1e-5 * rms;
  EXPECT_EQ(got.nonfinite(), 0u) << where;
  EXPECT_NEAR(got.mean(), want.mean, tol) << where;
  EXPECT_NEAR(got.std(), want.std, tol) << where;
  EXPECT_NEAR(got.min(), want.min, tol) << where;
  EXPECT_NEAR(got.max(), want.max, tol) << where;
  EXPECT_NEAR(got.l2_norm(), want.l2_norm, 1e-5 * want.l2_norm) << where;
  EXPECT_EQ(got.full(), full) << where;
  if (!full) return;
  EXPECT_NEAR(got.median(), want.median, tol) << where;
  EXPECT_NEAR(got.abs_mean(), want.abs_mean, tol) << where;
  EXPECT_NEAR(got.l1_norm(), want.l1_norm, 1e-5 * want.l1_norm) << where;
  EXPECT_NEAR(got.p5(), want.percentiles[0], tol) << where;
  EXPECT_NEAR(got.p25(), want.percentiles[1], tol) << where;
  EXPECT_NEAR(got.p75(), want.percentiles[3], tol) << where;
  EXPECT_NEAR(got.p95(), want.percentiles[4], tol) << where;
  EXPECT_EQ(got.histogram().counts_size(), model::kHistogramBins) << where;
}

// Every site at every position the request computed, per position and in total, against the scalar
// reference's forward over the session's tokens; compact and full.
TEST(ProbeTest, StatisticsEqualTheScalarReference) {
  auto engine = StartEngine(kContext);
  const auto model = LoadTinyModel(kContext);
  const model::ModelConfig& config = model->config;
  const model::ScalarReference reference(config, model->transformer->weights());
  for (const bool full : {false, true}) {
    SCOPED_TRACE(full ? "full" : "compact");
    const std::vector<int32_t> input = {5, 17, 3, 40, 22, 9, 11};
    constexpr int kNew = 6;
    auto sink = SubmitAsync(*engine, Probed(NewSession(*engine), input, kNew, full));
    const v1::Response response = sink->Wait();
    ASSERT_TRUE(response.has_generate()) << response.DebugString().substr(0, 2000);
    const v1::GenerateResponse& g = response.generate();
    ASSERT_EQ(g.new_ids_size(), kNew);
    // The computed positions: the input and every new id but the last.
    std::vector<int32_t> tokens = input;
    tokens.insert(tokens.end(), g.new_ids().begin(), g.new_ids().end() - 1);
    const int64_t positions = static_cast<int64_t>(tokens.size());
    std::map<std::pair<std::string, int64_t>, std::vector<float>> expected;
    std::map<std::string, std::vector<float>> totals;
    const model::ScalarReference::Hook hook = [&](model::HookSite site, int64_t layer, int64_t position,
                                                  const std::vector<float>& v) {
      const std::string name = model::HookSiteName(site, layer);
      expected[{name, position}] = v;
      totals[name].insert(totals[name].end(), v.begin(), v.end());
    };
    reference.Forward(tokens, -1, nullptr, &hook);
    const int64_t sites = model::HookSiteCount(config.layers);
    ASSERT_EQ(g.activations_size(), sites * positions);
    for (const v1::ActivationStats& a : g.activations()) {
      const auto found = expected.find({a.site(), a.position()});
      ASSERT_NE(found, expected.end()) << a.site() << " " << a.position();
      const std::vector<float>& values = found->second;
      const std::string where = fmt::format("{} at {}", a.site(), a.position());
      EXPECT_EQ(a.positions(), 1) << where;
      ASSERT_EQ(a.stats().shape_size(), 1) << where;
      EXPECT_EQ(a.stats().shape(0), static_cast<int64_t>(values.size())) << where;
      EXPECT_EQ(a.stats().dtype(), "f32");
      ExpectStatsNear(a.stats(), model::ComputeStatistics(values, full), Rms(values), full, where);
    }
    // Each site once per position; the order: position by position, sites in forward order.
    std::map<std::pair<std::string, int64_t>, int> seen;
    for (const v1::ActivationStats& a : g.activations()) ++seen[{a.site(), a.position()}];
    EXPECT_EQ(seen.size(), expected.size());
    EXPECT_EQ(g.activations(0).site(), "blocks.0.hook_resid_pre");
    EXPECT_EQ(g.activations(0).position(), 0);
    EXPECT_EQ(g.activations(1).site(), "blocks.0.hook_attn_out");
    EXPECT_EQ(g.activations(1).position(), 0);
    EXPECT_EQ(g.activations(sites).site(), "blocks.0.hook_resid_pre");
    EXPECT_EQ(g.activations(sites).position(), 1);
    ASSERT_EQ(g.activation_totals_size(), sites);
    for (const v1::ActivationStats& t : g.activation_totals()) {
      const std::vector<float>& values = totals.at(t.site());
      EXPECT_EQ(t.position(), -1);
      EXPECT_EQ(t.positions(), positions);
      ASSERT_EQ(t.stats().shape_size(), 2);
      EXPECT_EQ(t.stats().shape(0) * t.stats().shape(1), static_cast<int64_t>(values.size()));
      ExpectStatsNear(t.stats(), model::ComputeStatistics(values, full), Rms(values), full, t.site() + " total");
    }
    EXPECT_EQ(g.activation_totals(0).site(), "blocks.0.hook_resid_pre");
    EXPECT_EQ(g.activation_totals(sites - 1).site(), "ln_final.hook_normalized");
    // The stream: the first event holds every input position, then one position per event; joined
    // they are the response's.
    const std::vector<v1::Response>& events = sink->events();
    ASSERT_EQ(events.size(), static_cast<size_t>(kNew));
    EXPECT_EQ(events[0].token().activations_size(), sites * static_cast<int64_t>(input.size()));
    int k = 0;
    for (size_t e = 0; e < events.size(); ++e) {
      if (e > 0) {
        EXPECT_EQ(events[e].token().activations_size(), sites) << "event " << e;
      }
      for (const v1::ActivationStats& a : events[e].token().activations()) {
        ASSERT_LT(k, g.activations_size());
        EXPECT_EQ(a.SerializeAsString(), g.activations(k++).SerializeAsString());
      }
    }
    EXPECT_EQ(k, g.activations_size());
  }
}

// max_new_tokens = 0: the input's positions, in the response only; a selection of sites only.
TEST(ProbeTest, InputOnlyAndSelectedSites) {
  auto engine = StartEngine(kContext);
  v1::Request r = Probed(NewSession(*engine), {1, 2, 3, 4}, 0, false, {"blocks.*.hook_resid_post", "blocks.0.mlp.*"});
  auto sink = SubmitAsync(*engine, r);
  const v1::Response response = sink->Wait();
  ASSERT_TRUE(response.has_generate()) << response.DebugString().substr(0, 2000);
  EXPECT_TRUE(sink->events().empty());
  const auto model = LoadTinyModel(kContext);
  const int64_t sites = model->config.layers + 1;
  EXPECT_EQ(response.generate().activations_size(), sites * 4);
  EXPECT_EQ(response.generate().activation_totals_size(), sites);
  for (const v1::ActivationStats& a : response.generate().activations()) {
    EXPECT_TRUE(a.site().ends_with(".hook_resid_post") || a.site() == "blocks.0.mlp.hook_post") << a.site();
    if (a.site() == "blocks.0.mlp.hook_post") {
      EXPECT_EQ(a.stats().shape(0), model->config.d_ff);
    }
  }
}

// One probed request (every site, full) with 7 plain ones sharing its steps, in two orders: its ids
// and logprobs equal the same request without probes, and its statistics its solo run's; the others
// equal their solo runs.
TEST(ProbeTest, ProbingChangesNothingAloneOrBatched) {
  EngineOptions options;
  options.prefill_chunk = 4;
  auto engine = StartEngine(kContext, options);
  const std::vector<int32_t> input = {7, 8, 9, 10, 11, 12};
  const auto probed = [&](const std::string& session) { return Probed(session, input, 16, true); };
  v1::Request plain_request = probed(NewSession(*engine));
  plain_request.mutable_generate()->clear_probes();
  const v1::Response plain = Call(*engine, plain_request);
  const v1::Response solo = Call(*engine, probed(NewSession(*engine)));
  ASSERT_FALSE(OutcomeOf(plain).ids.empty());
  EXPECT_TRUE(OutcomeOf(solo) == OutcomeOf(plain));
  EXPECT_GT(solo.generate().activations_size(), 0);
  EXPECT_EQ(plain.generate().activations_size(), 0);
  const auto other = [](int k, const std::string& session) {
    v1::Request r = GenerateRequest(session, {static_cast<int32_t>(20 + k), 3, 4}, 12 + k);
    r.mutable_generate()->mutable_sampling()->set_temperature(k % 2 == 0 ? 0.0f : 0.9f);
    r.mutable_generate()->mutable_sampling()->set_seed(100 + k);
    r.mutable_generate()->set_want_logprobs(true);
    return r;
  };
  constexpr int kOthers = 7;
  std::vector<Outcome> others_solo;
  for (int k = 0; k < kOthers; ++k) others_solo.push_back(OutcomeOf(Call(*engine, other(k, NewSession(*engine)))));
  for (int round = 0; round < 2; ++round) {
    const std::string probed_session = NewSession(*engine);
    std::vector<std::string> sessions;
    for (int k = 0; k < kOthers; ++k) sessions.push_back(NewSession(*engine));
    auto gate = std::make_shared<GateSink>();
    v1::Request gate_request = GenerateRequest(NewSession(*engine), {3, 4}, 2);
    gate_request.mutable_generate()->set_stream(true);
    SubmitAsync(*engine, gate_request, kUid, nullptr, gate);
    gate->WaitEntered();
    std::shared_ptr<RecordingSink> probed_sink;
    std::vector<std::shared_ptr<RecordingSink>> sinks(kOthers);
    if (round == 0) probed_sink = SubmitAsync(*engine, probed(probed_session));
    for (int i = 0; i < kOthers; ++i) {
      const int k = round == 0 ? i : kOthers - 1 - i;
      sinks[k] = SubmitAsync(*engine, other(k, sessions[k]));
    }
    if (round == 1) probed_sink = SubmitAsync(*engine, probed(probed_session));
    gate->Open();
    const v1::Response together = probed_sink->Wait();
    EXPECT_TRUE(OutcomeOf(together) == OutcomeOf(plain)) << "round " << round;
    ASSERT_EQ(together.generate().activations_size(), solo.generate().activations_size());
    for (int i = 0; i < solo.generate().activations_size(); ++i) {
      ASSERT_EQ(together.generate().activations(i).SerializeAsString(),
                solo.generate().activations(i).SerializeAsString())
          << "round " << round << " statistic " << i;
    }
    ASSERT_EQ(together.generate().activation_totals_size(), solo.generate().activation_totals_size());
    for (int i = 0; i < solo.generate().activation_totals_size(); ++i) {
      EXPECT_EQ(together.generate().activation_totals(i).SerializeAsString(),
                solo.generate().activation_totals(i).SerializeAsString());
    }
    for (int k = 0; k < kOthers; ++k) {
      EXPECT_TRUE(OutcomeOf(sinks[k]->Wait()) == others_solo[k]) << "other " << k << " round " << round;
    }
  }
  v1::Request stats;
  stats.mutable_stats();
  EXPECT_GT(Call(*engine, stats).stats().mean_batch_size(), 1.5) << "the requests shared decode steps";
}

// A refused request: the error naming `part`, no stream events, the session unchanged.
void ExpectRefused(Service& engine, const v1::Request& request, const std::string& part) {
  const std::string& session = request.generate().session_id();
  const int64_t before = Call(engine, GetRequest(session)).get_session().session().length();
  auto sink = SubmitAsync(engine, request);
  const v1::Response response = sink->Wait();
  EXPECT_EQ(ErrorOf(response), v1::INVALID_ARGUMENT) << response.DebugString().substr(0, 1000);
  EXPECT_NE(response.error().message().find(part), std::string::npos) << response.error().message();
  EXPECT_TRUE(sink->events().empty());
  EXPECT_EQ(Call(engine, GetRequest(session)).get_session().session().length(), before);
}

TEST(ProbeTest, BadSpecsAreRefusedBeforeAnyToken) {
  auto engine = StartEngine(kContext);
  const std::string s = NewSession(*engine);
  const std::vector<int32_t> input = {1, 2, 3};
  ExpectRefused(*engine, Probed(s, input, 4, false, {"blocks.0.hook_resid_pre", "blocks.0.hook_nope"}),
                "probes.sites[1]: unknown hook site");
  ExpectRefused(*engine, Probed(s, input, 4, false, {"blocks.99.hook_resid_pre"}), "probes.sites[0]: layer 99");
  ExpectRefused(*engine, Probed(s, input, 4, false, {"blocks.9*"}), "probes.sites[0]: 'blocks.9*' matches no");
  ExpectRefused(*engine, Probed(s, input, 4, false, {}), "probes.sites: name at least one");
  v1::Request neither = Probed(s, input, 4, false);
  neither.mutable_generate()->mutable_probes()->set_per_token(false);
  neither.mutable_generate()->mutable_probes()->set_aggregate(false);
  ExpectRefused(*engine, neither, "probes: ask for per_token or aggregate");
  v1::Request uncached = Probed(s, input, 4, false);
  uncached.mutable_generate()->set_use_kv_cache(false);
  ExpectRefused(*engine, uncached, "probes need the cached path");
  v1::Request traced = Probed(s, input, 4, false);
  traced.mutable_generate()->set_trace_layer(0);
  ExpectRefused(*engine, traced, "probes cannot be combined with trace_layer");
  ExpectRefused(*engine, Probed(s, input, 4, false, std::vector<std::string>(17, "*")),
                "(budget probe_site_patterns)");
  ExpectRefused(*engine, Probed(s, input, 4, false, {std::string(129, '*')}), "(budget probe_site_pattern_bytes)");
}

// The budgets of what a spec may produce, on a Qwen3-0.6B-shaped config (28 blocks, 169 sites).
TEST(ProbeTest, StatisticsAndTotalsAreBounded) {
  model::ModelConfig config;
  config.layers = 28;
  config.width = 1024;
  config.d_ff = 3072;
  v1::ProbeSpec spec;
  spec.add_sites("*");
  spec.set_per_token(true);
  // Compact: 169 x 775 = 130975 units fit, 169 x 776 = 131144 do not.
  EXPECT_TRUE(ProbeFromProto(spec, config, 775).ok());
  const auto compact = ProbeFromProto(spec, config, 776);
  ASSERT_FALSE(compact.ok());
  EXPECT_EQ(compact.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_TRUE(compact.status().message().ends_with("(budget probe_statistics)")) << compact.status().message();
  spec.set_full(true);  // 5 units each
  EXPECT_TRUE(ProbeFromProto(spec, config, 155).ok());
  EXPECT_FALSE(ProbeFromProto(spec, config, 156).ok());
  // Full totals keep every value: (28 x (5 x 1024 + 3072) + 1024) = 230400 values per position.
  spec.set_per_token(false);
  spec.set_aggregate(true);
  EXPECT_TRUE(ProbeFromProto(spec, config, 72).ok());
  const auto totals = ProbeFromProto(spec, config, 73);
  ASSERT_FALSE(totals.ok());
  EXPECT_TRUE(totals.status().message().ends_with("(budget probe_total_values)")) << totals.status().message();
  spec.set_full(false);  // compact totals hold a few numbers per site
  EXPECT_TRUE(ProbeFromProto(spec, config, 32768).ok());
}

}  // namespace probe_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
