// Sampling.logit_bias through the Service (the wire request in, the response out) with the tiny
// random-weight model: a biased request gives bitwise the same ids and logprobs alone and batched
// with seven unbiased ones (cached and uncached, Chat and Generate); invalid biases are refused
// before any token naming the entry; a constraint's mask and banned ids win over a positive bias.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/budgets.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace logit_bias_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string CreateSession(Service& engine) {
  const v1::Response response = Call(engine, CreateRequest());
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

// Deletes every session of kUid (a user holds at most 64 in memory).
void DeleteAllSessions(Service& engine) {
  v1::Request list;
  list.mutable_list_sessions();
  const v1::Response listed = Call(engine, list);
  for (const v1::SessionInfo& session : listed.list_sessions().sessions()) {
    v1::Request del;
    del.mutable_delete_session()->set_session_id(session.session_id());
    EXPECT_FALSE(Call(engine, del).has_error());
  }
}

void AddBias(v1::Sampling* sampling, int32_t id, float bias) {
  v1::TokenBias* entry = sampling->add_logit_bias();
  entry->set_id(id);
  entry->set_bias(bias);
}

// The biased request: sampled at temperature 1 with logprobs, a bias up, down and a ban.
v1::Request BiasedGenerate(const std::string& session, bool biased, bool use_kv_cache) {
  v1::Request r = GenerateRequest(session, {7, 8, 9, 10}, 24);
  v1::GenerateRequest& g = *r.mutable_generate();
  g.mutable_sampling()->set_temperature(1.0f);
  g.mutable_sampling()->set_top_k(0);
  g.mutable_sampling()->set_seed(5);
  g.set_want_logprobs(true);
  g.set_top_logprobs(5);
  g.set_use_kv_cache(use_kv_cache);
  g.set_stream(true);
  if (biased) {
    AddBias(g.mutable_sampling(), 30, 4.0f);
    AddBias(g.mutable_sampling(), 31, 2.5f);
    AddBias(g.mutable_sampling(), 12, kNegInf);
    AddBias(g.mutable_sampling(), 40, -3.0f);
  }
  return r;
}

v1::Request BiasedChat(const std::string& session) {
  v1::Request r = ChatRequest(session, "a biased chat", 20, /*use_kv_cache=*/true, /*stream=*/true);
  r.mutable_chat()->mutable_sampling()->set_temperature(0.8f);
  r.mutable_chat()->mutable_sampling()->set_seed(11);
  AddBias(r.mutable_chat()->mutable_sampling(), 33, 3.0f);
  AddBias(r.mutable_chat()->mutable_sampling(), 34, kNegInf);
  return r;
}

// Unbiased company: Chat and Generate, sampled and greedy, streamed or not, cached and uncached.
v1::Request Other(int k, const std::string& session) {
  if (k % 2 == 0) {
    v1::Request r = GenerateRequest(session, {static_cast<int32_t>(11 + k), 12}, 20 + k);
    r.mutable_generate()->mutable_sampling()->set_temperature(k == 2 ? 0.0f : 0.9f);
    r.mutable_generate()->mutable_sampling()->set_seed(100 + k);
    r.mutable_generate()->set_want_logprobs(true);
    r.mutable_generate()->set_use_kv_cache(k != 4);
    return r;
  }
  v1::Request r = ChatRequest(session, fmt::format("other {}", k), 18 + k, /*use_kv_cache=*/true, /*stream=*/k == 3);
  r.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
  r.mutable_chat()->mutable_sampling()->set_seed(200 + k);
  return r;
}

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // each step's logprob and its alternatives' (id and logprob)
  std::vector<int32_t> streamed_ids;
  std::string text;
  v1::StopReason stop = v1::STOP_REASON_UNSPECIFIED;
  bool operator==(const Outcome&) const = default;
};

Outcome OutcomeOf(const v1::Response& response, const std::vector<v1::Response>& events) {
  Outcome o;
  if (response.has_chat()) {
    o.ids.assign(response.chat().reply_ids().begin(), response.chat().reply_ids().end());
    o.text = response.chat().reply();
    o.stop = response.chat().stop_reason();
  } else if (response.has_generate()) {
    o.ids.assign(response.generate().new_ids().begin(), response.generate().new_ids().end());
    o.stop = response.generate().stop_reason();
    for (const v1::StepInfo& step : response.generate().steps()) {
      o.logprobs.push_back(step.logprob());
      for (const v1::TokenAlternative& alt : step.top()) {
        o.logprobs.push_back(static_cast<float>(alt.id()));
        o.logprobs.push_back(alt.logprob());
      }
    }
  } else {
    ADD_FAILURE() << response.DebugString();
  }
  for (const v1::Response& e : events) o.streamed_ids.push_back(e.token().id());
  return o;
}

Outcome Solo(Service& engine, const v1::Request& request) {
  auto sink = SubmitAsync(engine, request);
  const v1::Response response = sink->Wait();
  return OutcomeOf(response, sink->events());
}

// One biased request (`biased(session)`) with 7 unbiased ones sharing decode steps, in two orders;
// every request's outcome equals its solo run bitwise.
template <typename MakeBiased>
void ExpectBatchInvariant(Service& engine, MakeBiased biased, const char* what) {
  constexpr int kOthers = 7;
  DeleteAllSessions(engine);
  const Outcome solo_biased = Solo(engine, biased(CreateSession(engine)));
  std::vector<Outcome> solo;
  for (int k = 0; k < kOthers; ++k) solo.push_back(Solo(engine, Other(k, CreateSession(engine))));
  for (int round = 0; round < 2; ++round) {
    // Sessions first: the engine serves nothing else while the gate holds it.
    const std::string biased_session = CreateSession(engine);
    std::vector<std::string> sessions;
    for (int k = 0; k < kOthers; ++k) sessions.push_back(CreateSession(engine));
    auto gate = std::make_shared<GateSink>();
    v1::Request gate_request = GenerateRequest(CreateSession(engine), {3, 4}, 2);
    gate_request.mutable_generate()->set_stream(true);
    SubmitAsync(engine, gate_request, kUid, nullptr, gate);
    gate->WaitEntered();
    // Round 0: the biased request first (row 0); round 1: last, so it sits in another row.
    std::vector<std::shared_ptr<RecordingSink>> sinks(kOthers);
    std::shared_ptr<RecordingSink> biased_sink;
    if (round == 0) biased_sink = SubmitAsync(engine, biased(biased_session));
    for (int i = 0; i < kOthers; ++i) {
      const int k = round == 0 ? i : kOthers - 1 - i;
      sinks[k] = SubmitAsync(engine, Other(k, sessions[k]));
    }
    if (round == 1) biased_sink = SubmitAsync(engine, biased(biased_session));
    gate->Open();
    const v1::Response response = biased_sink->Wait();
    const Outcome together = OutcomeOf(response, biased_sink->events());
    EXPECT_EQ(together.ids, solo_biased.ids) << what << " round " << round;
    EXPECT_EQ(together.logprobs, solo_biased.logprobs) << what << " round " << round;
    EXPECT_TRUE(together == solo_biased) << what << " round " << round;
    for (int k = 0; k < kOthers; ++k) {
      const v1::Response other = sinks[k]->Wait();
      EXPECT_TRUE(OutcomeOf(other, sinks[k]->events()) == solo[k]) << what << " other " << k << " round " << round;
    }
  }
}

TEST(LogitBiasTest, ABiasedRequestIsBitwiseBatchInvariant) {
  EngineOptions options;
  options.prefill_chunk = 8;
  auto engine = StartEngine(kContext, options);
  // The bias changes the outcome (so the comparisons below can fail), and the banned id never comes.
  const Outcome plain = Solo(*engine, BiasedGenerate(CreateSession(*engine), false, true));
  const Outcome biased = Solo(*engine, BiasedGenerate(CreateSession(*engine), true, true));
  ASSERT_FALSE(biased.ids.empty());
  EXPECT_NE(plain.ids, biased.ids);
  EXPECT_NE(plain.logprobs, biased.logprobs);
  for (int32_t id : biased.ids) EXPECT_NE(id, 12);

  ExpectBatchInvariant(*engine, [](const std::string& s) { return BiasedGenerate(s, true, true); }, "generate");
  ExpectBatchInvariant(*engine, [](const std::string& s) { return BiasedGenerate(s, true, false); }, "uncached");
  ExpectBatchInvariant(*engine, [](const std::string& s) { return BiasedChat(s); }, "chat");
  v1::Request stats;
  stats.mutable_stats();
  EXPECT_GT(Call(*engine, stats).stats().mean_batch_size(), 1.5) << "the requests shared decode steps";
}

// A refused request: the error naming `part`, no stream events, the session unchanged.
void ExpectRefused(Service& engine, v1::Request request, const std::string& part) {
  const std::string session = request.has_chat() ? request.chat().session_id() : request.generate().session_id();
  const int64_t before = Call(engine, GetRequest(session)).get_session().session().length();
  if (request.has_chat()) request.mutable_chat()->set_stream(true);
  if (request.has_generate()) request.mutable_generate()->set_stream(true);
  auto sink = SubmitAsync(engine, request);
  const v1::Response response = sink->Wait();
  EXPECT_EQ(ErrorOf(response), v1::INVALID_ARGUMENT) << response.DebugString().substr(0, 300);
  EXPECT_NE(response.error().message().find(part), std::string::npos)
      << "'" << part << "' not in: " << response.error().message();
  EXPECT_TRUE(sink->events().empty());
  EXPECT_EQ(Call(engine, GetRequest(session)).get_session().session().length(), before);
}

uint64_t RefusedUnderLogitBias(Service& engine) {
  v1::Request stats;
  stats.mutable_stats();
  const v1::Response response = Call(engine, stats);
  for (const v1::BudgetRefusals& r : response.stats().budget_refusals()) {
    if (r.name() == "logit_bias") return r.refused();
  }
  return 0;
}

TEST(LogitBiasTest, InvalidBiasesAreRefusedBeforeAnyTokenNamingTheEntry) {
  auto engine = StartEngine(kContext);
  const std::string session = CreateSession(*engine);
  ASSERT_TRUE(Call(*engine, ChatRequest(session, "first", 3)).has_chat());
  const int32_t vocab = static_cast<int32_t>(LoadTinyModel(kContext)->config.vocab_size);
  auto generate = [&](auto fill) {
    v1::Request r = GenerateRequest(session, {5, 6}, 4);
    fill(r.mutable_generate()->mutable_sampling());
    return r;
  };
  auto chat = [&](auto fill) {
    v1::Request r = ChatRequest(session, "go", 4);
    fill(r.mutable_chat()->mutable_sampling());
    return r;
  };
  for (bool use_chat : {false, true}) {
    auto request = [&](auto fill) { return use_chat ? chat(fill) : generate(fill); };
    ExpectRefused(*engine, request([&](v1::Sampling* s) { AddBias(s, 1, 1.0f); AddBias(s, vocab, 1.0f); }),
                  fmt::format("sampling.logit_bias[1]: id {} is outside the vocabulary [0, {})", vocab, vocab));
    ExpectRefused(*engine, request([&](v1::Sampling* s) { AddBias(s, -3, 1.0f); }),
                  "sampling.logit_bias[0]: id -3 is outside the vocabulary");
    ExpectRefused(*engine, request([&](v1::Sampling* s) { AddBias(s, 4, std::nanf("")); }),
                  "sampling.logit_bias[0]: the bias must be finite or -inf");
    ExpectRefused(*engine, request([&](v1::Sampling* s) { AddBias(s, 2, 0.5f); AddBias(s, 4, INFINITY); }),
                  "sampling.logit_bias[1]: the bias must be finite or -inf");
    ExpectRefused(*engine, request([&](v1::Sampling* s) { AddBias(s, 9, 1.0f); AddBias(s, 8, 1.0f); AddBias(s, 9, -1.0f); }),
                  "sampling.logit_bias[2]: id 9 already has a bias (sampling.logit_bias[0])");
    // Every id banned by -inf biases.
    ExpectRefused(*engine, request([&](v1::Sampling* s) { for (int32_t id = 0; id < vocab; ++id) AddBias(s, id, kNegInf); }),
                  fmt::format("every one of the {} ids is banned", vocab));
    // One entry past the bound: refused under the budget, counted.
    const uint64_t refused = RefusedUnderLogitBias(*engine);
    ExpectRefused(*engine, request([&](v1::Sampling* s) { for (int32_t id = 0; id <= vocab; ++id) AddBias(s, id % vocab, 1.0f); }),
                  fmt::format("sampling.logit_bias: {} entries (the limit is the vocabulary size, {}) (budget logit_bias)",
                              vocab + 1, vocab));
    EXPECT_EQ(RefusedUnderLogitBias(*engine), refused + 1);
  }
  // At the bound (every id once, one of them raised far above the rest) the request runs.
  v1::Request at_bound = generate([&](v1::Sampling* s) {
    for (int32_t id = 0; id < vocab; ++id) AddBias(s, id, id == 57 ? 1000.0f : -1.0f);
  });
  const v1::Response response = Call(*engine, at_bound);
  ASSERT_TRUE(response.has_generate()) << response.DebugString().substr(0, 300);
  EXPECT_EQ(std::vector<int32_t>(response.generate().new_ids().begin(), response.generate().new_ids().end()),
            std::vector<int32_t>(4, 57));
}

// A constraint's mask and the banned ids come after the bias: a +1000 bias cannot bring back an id
// either takes away. A -inf bias on the only stop id leaves a constraint no end: refused.
TEST(LogitBiasTest, ConstraintsAndBannedIdsWinOverAPositiveBias) {
  auto engine = StartEngine(kContext);
  const std::string session = CreateSession(*engine);
  const auto model = LoadTinyModel(kContext);
  const int32_t vocab = static_cast<int32_t>(model->config.vocab_size);
  v1::Request chat = ChatRequest(session, "yes or no?", 12);
  chat.mutable_chat()->mutable_constraint()->set_gbnf("root ::= \"yes\" | \"no\"\n");
  for (int32_t id = 0; id < vocab; ++id) {
    if (id != model->special.eot) AddBias(chat.mutable_chat()->mutable_sampling(), id, 1000.0f);
  }
  v1::Response response = Call(*engine, chat);
  ASSERT_TRUE(response.has_chat()) << response.DebugString().substr(0, 300);
  EXPECT_TRUE(response.chat().reply() == "yes" || response.chat().reply() == "no") << response.chat().reply();
  EXPECT_EQ(response.chat().stop_reason(), v1::EOT);

  v1::Request banned = GenerateRequest(session, {5}, 6);
  AddBias(banned.mutable_generate()->mutable_sampling(), 57, 1000.0f);
  banned.mutable_generate()->mutable_sampling()->add_banned_ids(57);
  response = Call(*engine, banned);
  ASSERT_TRUE(response.has_generate()) << response.DebugString().substr(0, 300);
  for (int32_t id : response.generate().new_ids()) EXPECT_NE(id, 57);

  v1::Request no_end = ChatRequest(session, "yes or no?", 12);
  no_end.mutable_chat()->mutable_constraint()->set_gbnf("root ::= \"yes\" | \"no\"\n");
  AddBias(no_end.mutable_chat()->mutable_sampling(), model->special.eot, kNegInf);
  ExpectRefused(*engine, no_end, "with a constraint, some stop id must not be banned");
}

}  // namespace logit_bias_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
