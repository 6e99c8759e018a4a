// The iteration-level scheduler (engine.h, "Scheduling") through Engine::Submit with the tiny real
// model: many sessions generating at once give exactly their solo results (batch invariance through
// the whole engine), cancel and disconnect touch only their own request, KV-budget admission, Stats.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <span>
#include <memory>
#include <string>
#include <thread>
#include <vector>


#include <gtest/gtest.h>

#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace scheduler_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 256;

std::string CreateSession(Service& engine) {
  const v1::Response response = Call(engine, CreateRequest());
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

v1::StatsResponse Stats(Service& engine) {
  v1::Request request;
  request.mutable_stats();
  return Call(engine, request).stats();
}

std::vector<int32_t> Ids(int n, int seed, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((seed * 131 + i * 17) % (vocab - 10) + 5));
  return ids;
}

// Request k of the mixed load: Chat and Generate, cached and uncached, streamed or not, greedy and
// seeded sampling, prompts shorter and longer than a prefill chunk.
v1::Request MixedRequest(int k, const std::string& session, int64_t vocab) {
  const int new_tokens = 6 + (k * 5) % 11;
  switch (k % 4) {
    case 0: {
      v1::Request r = ChatRequest(session, "hello there, how are you today? " + std::to_string(k), new_tokens,
                                  /*use_kv_cache=*/true, /*stream=*/true);
      return r;
    }
    case 1: {
      v1::Request r = GenerateRequest(session, Ids(3 + 7 * k, k, vocab), new_tokens);
      r.mutable_generate()->mutable_sampling()->set_temperature(0.9f);
      r.mutable_generate()->mutable_sampling()->set_seed(100 + k);
      r.mutable_generate()->set_want_logprobs(true);
      r.mutable_generate()->set_top_logprobs(3);
      r.mutable_generate()->set_stream(true);
      return r;
    }
    case 2:
      return ChatRequest(session, "tell me about nielsd " + std::to_string(k), new_tokens, /*use_kv_cache=*/false);
    default: {
      v1::Request r = GenerateRequest(session, Ids(40 + k, k, vocab), new_tokens);
      if (k == 7) r.mutable_generate()->set_trace_layer(1);
      return r;
    }
  }
}

// What must be identical between a solo and a concurrent run.
struct Outcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<int32_t> streamed;
  int64_t session_length = 0;
  std::string text;
};

Outcome OutcomeOf(const v1::Response& response, const std::vector<v1::Response>& events) {
  Outcome o;
  if (response.has_chat()) {
    o.ids.assign(response.chat().reply_ids().begin(), response.chat().reply_ids().end());
    o.session_length = response.chat().session_length();
    o.text = response.chat().reply();
  } else if (response.has_generate()) {
    o.ids.assign(response.generate().new_ids().begin(), response.generate().new_ids().end());
    o.session_length = response.generate().session_length();
    for (const v1::StepInfo& step : response.generate().steps()) {
      o.logprobs.push_back(step.logprob());
      for (const v1::TokenAlternative& alt : step.top()) o.logprobs.push_back(alt.logprob());
      o.logprobs.insert(o.logprobs.end(), step.attention().begin(), step.attention().end());
    }
  } else {
    ADD_FAILURE() << "unexpected response " << response.DebugString();
  }
  for (const v1::Response& event : events) o.streamed.push_back(event.token().id());
  return o;
}

// 16 clients at once on separate sessions, mixed Chat/Generate/uncached/streaming, prefill chunks
// of 8 tokens interleaved with the batched decode steps, plus two requests cancelled while they run:
// every reply is bitwise the reply of its solo run (ids, logprobs, attention rows), and greedy
// replies are what the full forward over the session's tokens predicts.
TEST(SchedulerTest, SixteenConcurrentMixedRequestsEachEqualTheirSoloRun) {
  EngineOptions options;
  options.prefill_chunk = 8;
  auto engine = StartEngine(kContext, options);
  const int64_t vocab = LoadTinyModel(kContext)->config.vocab_size;
  constexpr int kClients = 16;

  std::vector<Outcome> solo;
  for (int k = 0; k < kClients; ++k) {
    auto sink = SubmitAsync(*engine, MixedRequest(k, CreateSession(*engine), vocab));
    const v1::Response final_response = sink->Wait();
    solo.push_back(OutcomeOf(final_response, sink->events()));
  }
  EXPECT_EQ(Stats(*engine).mean_batch_size(), 1.0) << "solo runs decode one sequence per step";

  std::vector<std::string> sessions;
  for (int k = 0; k < kClients; ++k) sessions.push_back(CreateSession(*engine));
  // Two more streams, cancelled after their third token (one by Cancel, one by a vanished client).
  const std::string cancelled_session = CreateSession(*engine);
  const std::string vanished_session = CreateSession(*engine);
  auto cancel_flag = std::make_shared<std::atomic<bool>>(false);
  auto cancelled = std::make_shared<RecordingSink>();
  cancelled->on_event = [&, calls = 0](const v1::Response&) mutable {
    if (++calls == 3) cancel_flag->store(true);
    return true;
  };
  auto vanished = std::make_shared<RecordingSink>();
  vanished->on_event = [calls = 0](const v1::Response&) mutable { return ++calls < 3; };
  v1::Request long_generate = GenerateRequest(cancelled_session, Ids(20, 99, vocab), 100);
  long_generate.mutable_generate()->set_stream(true);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  SubmitAsync(*engine, long_generate, kUid, cancel_flag, cancelled);
  for (int k = 0; k < kClients; ++k) sinks.push_back(SubmitAsync(*engine, MixedRequest(k, sessions[k], vocab)));
  long_generate.mutable_generate()->set_session_id(vanished_session);
  SubmitAsync(*engine, long_generate, kUid, nullptr, vanished);

  for (int k = 0; k < kClients; ++k) {
    const v1::Response final_response = sinks[k]->Wait();
    const Outcome together = OutcomeOf(final_response, sinks[k]->events());
    EXPECT_EQ(together.ids, solo[k].ids) << "request " << k;
    EXPECT_EQ(together.logprobs, solo[k].logprobs) << "request " << k << ": logprobs/attention differ";
    EXPECT_EQ(together.streamed, solo[k].streamed) << "request " << k;
    EXPECT_EQ(together.session_length, solo[k].session_length) << "request " << k;
    EXPECT_EQ(together.text, solo[k].text) << "request " << k;
    EXPECT_FALSE(together.ids.empty()) << "request " << k;
  }
  EXPECT_EQ(ErrorOf(cancelled->Wait()), v1::CANCELLED);
  EXPECT_EQ(ErrorOf(vanished->Wait()), v1::CANCELLED);
  EXPECT_LT(cancelled->events().size(), 10u) << "the cancelled stream stopped within an iteration or two";
  for (const std::string& id : {cancelled_session, vanished_session}) {
    EXPECT_EQ(Call(*engine, GetRequest(id)).get_session().session().length(), 0) << "restored: " << id;
  }
  const v1::StatsResponse stats = Stats(*engine);
  // The solo runs above made ~100 one-row steps; the concurrent ones must have been batched to
  // lift the mean this far.
  EXPECT_GT(stats.mean_batch_size(), 1.1) << "the sequences really shared decode steps";
  EXPECT_GT(stats.iterations_per_s(), 0.0);
  EXPECT_EQ(stats.running_sequences(), 0u);

  // Greedy Generate requests (k % 4 == 3): each new id is the argmax of the full forward over the
  // session's tokens before it.
  auto model = LoadTinyModel(kContext);
  for (int k = 3; k < kClients; k += 4) {
    const v1::Response got = Call(*engine, GetRequest(sessions[k]));
    const std::vector<int32_t> tokens(got.get_session().token_ids().begin(), got.get_session().token_ids().end());
    const size_t generated = solo[k].ids.size();
    ASSERT_GE(tokens.size(), generated);
    for (size_t p = tokens.size() - generated; p < tokens.size(); ++p) {
      const std::vector<float> logits =
          model->transformer->Forward(std::span<const int32_t>(tokens).first(p), /*last_only=*/true);
      EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), tokens[p])
          << "request " << k << " position " << p;
    }
  }
}

// A sink that stamps its final response with the number of events every sink of a group had seen
// at that moment (equal requests must finish together).
struct RaceSink : RecordingSink {
  std::vector<std::shared_ptr<RaceSink>>* group = nullptr;
  std::atomic<int> seen{0};
  std::vector<int> others_at_final;
  bool Send(v1::Response response, bool final) override {
    if (!final) {
      ++seen;
    } else {
      for (const auto& other : *group) others_at_final.push_back(other->seen.load());
    }
    return RecordingSink::Send(std::move(response), final);
  }
};

TEST(SchedulerTest, EqualRequestsStartedTogetherFinishTogether) {
  auto engine = StartEngine(kContext);
  const int64_t vocab = LoadTinyModel(kContext)->config.vocab_size;
  constexpr int kRequests = 8, kTokens = 60;
  std::vector<std::string> sessions;
  for (int k = 0; k < kRequests; ++k) sessions.push_back(CreateSession(*engine));
  auto gate = std::make_shared<GateSink>();
  v1::Request gate_request = GenerateRequest(CreateSession(*engine), Ids(3, 50, vocab), 2);
  gate_request.mutable_generate()->set_stream(true);
  SubmitAsync(*engine, gate_request, kUid, nullptr, gate);
  gate->WaitEntered();
  std::vector<std::shared_ptr<RaceSink>> sinks;
  for (int k = 0; k < kRequests; ++k) sinks.push_back(std::make_shared<RaceSink>());
  for (auto& sink : sinks) sink->group = &sinks;
  for (int k = 0; k < kRequests; ++k) {
    v1::Request r = GenerateRequest(sessions[k], Ids(10, k, vocab), kTokens);
    r.mutable_generate()->set_stream(true);
    r.mutable_generate()->mutable_sampling()->add_banned_ids(LoadTinyModel(kContext)->special.eot);
    SubmitAsync(*engine, r, kUid, nullptr, sinks[k]);
  }
  gate->Open();
  for (auto& sink : sinks) ASSERT_EQ(sink->Wait().generate().new_ids_size(), kTokens);
  // When any of them finished, every other one had produced nearly all of its tokens: they ran in
  // the same decode steps (at most one admission pass and a prefill per iteration apart).
  for (int k = 0; k < kRequests; ++k) {
    for (int other : sinks[k]->others_at_final) {
      EXPECT_GE(other, kTokens - kRequests - 2) << "request " << k << " finished while another had " << other;
    }
  }
}

TEST(SchedulerTest, QueuedRequestIsCancelledBeforeTheRunningGenerationEnds) {
  EngineOptions options;
  options.max_batch = 1;  // the second generation must queue
  auto engine = StartEngine(kContext, options);
  const int64_t vocab = LoadTinyModel(kContext)->config.vocab_size;
  const std::string a = CreateSession(*engine), b = CreateSession(*engine);
  v1::Request long_request = GenerateRequest(a, Ids(5, 1, vocab), 200);
  long_request.mutable_generate()->set_stream(true);
  long_request.mutable_generate()->mutable_sampling()->add_banned_ids(
      LoadTinyModel(kContext)->special.eot);
  auto running = std::make_shared<RecordingSink>();
  std::atomic<int> events{0};
  running->on_event = [&](const v1::Response&) {
    ++events;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow stream: ~0.4 s in all
    return true;
  };
  SubmitAsync(*engine, long_request, kUid, nullptr, running);
  while (events.load() == 0) std::this_thread::yield();
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  auto queued = SubmitAsync(*engine, GenerateRequest(b, Ids(5, 2, vocab), 10), kUid, cancel);
  auto queued_get = SubmitAsync(*engine, GetRequest(a));  // waits behind a's running turn
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(queued->finals(), 0) << "waits for a batch slot";
  EXPECT_EQ(Stats(*engine).queued_requests(), 2u);
  cancel->store(true);
  EXPECT_EQ(ErrorOf(queued->Wait()), v1::CANCELLED);
  EXPECT_EQ(running->finals(), 0) << "answered while the running generation goes on";
  EXPECT_EQ(queued_get->finals(), 0) << "GetSession on the running session waits for its turn";
  ASSERT_TRUE(running->Wait().has_generate());
  EXPECT_EQ(queued_get->Wait().get_session().session().length(), 205) << "it saw the whole turn";
  EXPECT_EQ(Call(*engine, GetRequest(b)).get_session().session().length(), 0);
}

// KV-budget-aware admission: a request that does not fit beside a running one waits and then runs;
// one that can never fit fails at once; the running one is not disturbed.
TEST(SchedulerTest, RequestWithoutKvMemoryWaitsOrFailsWhileOthersContinue) {
  auto model = LoadTinyModel(kContext);
  const uint64_t per_token = 2ull * model->config.layers * model->config.width * sizeof(float);
  EngineOptions options;
  options.kv_budget_bytes = per_token * 160;  // one 110-token request (128 positions), not two
  auto engine = StartEngine(kContext, options);
  const int64_t vocab = model->config.vocab_size;
  const std::string a = CreateSession(*engine), b = CreateSession(*engine), c = CreateSession(*engine);
  auto slow = std::make_shared<RecordingSink>();
  std::atomic<int> events{0};
  slow->on_event = [&](const v1::Response&) {
    ++events;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return true;
  };
  v1::Request first = GenerateRequest(a, Ids(10, 1, vocab), 100);
  first.mutable_generate()->set_stream(true);
  first.mutable_generate()->mutable_sampling()->add_banned_ids(model->special.eot);
  SubmitAsync(*engine, first, kUid, nullptr, slow);
  while (events.load() == 0) std::this_thread::yield();
  auto waiting = SubmitAsync(*engine, GenerateRequest(b, Ids(10, 2, vocab), 100));
  auto too_big = SubmitAsync(*engine, GenerateRequest(c, Ids(10, 3, vocab), 200));
  EXPECT_EQ(ErrorOf(too_big->Wait()), v1::RESOURCE_EXHAUSTED);
  EXPECT_NE(too_big->Wait().error().message().find("KV"), std::string::npos) << too_big->Wait().DebugString();
  EXPECT_EQ(waiting->finals(), 0);
  EXPECT_EQ(slow->finals(), 0) << "the running request goes on meanwhile";
  ASSERT_TRUE(slow->Wait().has_generate());
  EXPECT_EQ(slow->Wait().generate().new_ids_size(), 100);
  const v1::Response second = waiting->Wait();
  ASSERT_TRUE(second.has_generate()) << second.DebugString();
  EXPECT_GT(second.generate().stats().queue_ms(), 0.0);
}

}  // namespace scheduler_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
