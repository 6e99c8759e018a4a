// Engine: every non-generating request kind (success and error paths), ownership, limits, the queue,
// shutdown and the KV budget, on a tiny real model directory.
#include "daemon/engine/engine.h"

#include <thread>

#include <gtest/gtest.h>

#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace service_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 64;

std::string CreateSession(Service& engine, const std::string* system = nullptr, uint32_t uid = kUid) {
  v1::Response response = Call(engine, CreateRequest(system), uid);
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

TEST(EngineTest, InfoDescribesTheModel) {
  EngineOptions options;
  options.session_limits.max_sessions = 7;
  options.kv_budget_bytes = 12345678;
  auto engine = StartEngine(kContext, options);
  auto model = LoadTinyModel(kContext);
  v1::Response response = Call(*engine, [] { v1::Request r; r.mutable_info(); return r; }());
  ASSERT_TRUE(response.has_info()) << response.DebugString();
  const v1::InfoResponse& info = response.info();
  EXPECT_EQ(info.model_name(), "tiny");
  EXPECT_EQ(info.model_path(), TinyModelDir(kContext).string());
  EXPECT_EQ(info.vocab_size(), model->config.vocab_size);
  EXPECT_EQ(info.context(), kContext);
  EXPECT_EQ(info.width(), model->config.width);
  EXPECT_EQ(info.layers(), model->config.layers);
  EXPECT_EQ(info.heads(), model->config.heads);
  EXPECT_EQ(info.d_ff(), model->config.d_ff);
  EXPECT_DOUBLE_EQ(info.rope_theta(), model->config.rope_theta);
  const text::SpecialTokens& special = model->special;
  EXPECT_EQ(info.sys_id(), special.sys);
  EXPECT_EQ(info.usr_id(), special.usr);
  EXPECT_EQ(info.asst_id(), special.asst);
  EXPECT_EQ(info.eot_id(), special.eot);
  EXPECT_EQ(info.daemon_version(), NIELSD_VERSION);
  EXPECT_EQ(info.protocol_version(), 1u);
  EXPECT_EQ(info.max_sessions(), 7u);
  EXPECT_EQ(info.kv_budget_bytes(), 12345678u);
  EXPECT_EQ(info.default_system_prompt(), std::string(common::kDefaultSystemPrompt));
  // The defaults an unset field means, as the original CLI had them.
  EXPECT_EQ(info.default_max_new_tokens(), 256);
  EXPECT_FLOAT_EQ(info.default_sampling().temperature(), 0.9f);
  EXPECT_EQ(info.default_sampling().top_k(), 50);
  EXPECT_EQ(info.default_sampling().top_p(), 0.0f);
  EXPECT_EQ(info.default_sampling().repetition_penalty(), 1.0f);
  EXPECT_EQ(info.default_sampling().seed(), 42u);
}

TEST(EngineTest, UnsetMaxNewTokensMeansTheReportedDefault) {
  auto engine = StartEngine(1024);
  const std::string session = CreateSession(*engine);
  v1::Request request = GenerateRequest(session, {5, 6, 7}, 0);
  request.mutable_generate()->clear_max_new_tokens();
  request.mutable_generate()->add_stop_ids(0);  // effectively never stops early
  request.mutable_generate()->mutable_sampling()->add_banned_ids(0);
  const v1::Response response = Call(*engine, request);
  ASSERT_TRUE(response.has_generate()) << response.DebugString();
  EXPECT_EQ(response.generate().new_ids_size(), Call(*engine, [] {
              v1::Request info;
              info.mutable_info();
              return info;
            }()).info().default_max_new_tokens());
}

TEST(EngineTest, TokenizeAndDetokenize) {
  auto engine = StartEngine(kContext);
  auto model = LoadTinyModel(kContext);
  const std::string text = niels::testing::TinyCorpus().at(0);
  v1::Request tokenize;
  tokenize.mutable_tokenize()->set_text(text);
  v1::Response tokens = Call(*engine, tokenize);
  ASSERT_TRUE(tokens.has_tokenize()) << tokens.DebugString();
  const std::vector<int32_t> expected = niels::testing::EncodeText(*model->tokenizer, text);
  EXPECT_EQ(std::vector<int32_t>(tokens.tokenize().ids().begin(), tokens.tokenize().ids().end()), expected);
  ASSERT_EQ(tokens.tokenize().pieces_size(), static_cast<int>(expected.size()));
  EXPECT_EQ(tokens.tokenize().pieces(0), model->tokenizer->Piece(expected[0]));

  v1::Request detokenize;
  *detokenize.mutable_detokenize()->mutable_ids() = tokens.tokenize().ids();
  v1::Response back = Call(*engine, detokenize);
  ASSERT_TRUE(back.has_detokenize()) << back.DebugString();
  EXPECT_EQ(back.detokenize().text(), model->tokenizer->Decode(expected));

  for (int32_t bad : {-1, static_cast<int32_t>(model->config.vocab_size)}) {
    v1::Request request;
    request.mutable_detokenize()->add_ids(bad);
    EXPECT_EQ(ErrorOf(Call(*engine, request)), v1::INVALID_ARGUMENT) << bad;
  }
}

TEST(EngineTest, UnknownAndCancelKindsAreRefused) {
  auto engine = StartEngine(kContext);
  EXPECT_EQ(ErrorOf(Call(*engine, v1::Request())), v1::UNIMPLEMENTED);
  v1::Request cancel;
  cancel.mutable_cancel()->set_target_request_id(3);
  EXPECT_EQ(ErrorOf(Call(*engine, cancel)), v1::INVALID_ARGUMENT);
}

TEST(EngineTest, ResponsesEchoTheRequestId) {
  auto engine = StartEngine(kContext);
  v1::Request request;
  request.set_request_id(987654321);
  request.mutable_stats();
  EXPECT_EQ(Call(*engine, request).request_id(), 987654321u);
  request.clear_kind();
  EXPECT_EQ(Call(*engine, request).request_id(), 987654321u);  // errors too
}

TEST(EngineTest, CreateSessionWithSystemPromptPrefillsIt) {
  auto engine = StartEngine(kContext);
  auto model = LoadTinyModel(kContext);
  const text::SpecialTokens& special = model->special;
  const std::string system = "be brief";
  const std::string id = CreateSession(*engine, &system);
  EXPECT_EQ(id.size(), 32u);
  std::vector<int32_t> expected = {special.sys};
  for (int32_t t : niels::testing::EncodeText(*model->tokenizer, system)) expected.push_back(t);
  expected.push_back(special.eot);

  v1::Response got = Call(*engine, GetRequest(id));
  ASSERT_TRUE(got.has_get_session()) << got.DebugString();
  EXPECT_EQ(std::vector<int32_t>(got.get_session().token_ids().begin(), got.get_session().token_ids().end()),
            expected);
  const v1::SessionInfo& info = got.get_session().session();
  EXPECT_EQ(info.session_id(), id);
  EXPECT_EQ(info.length(), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(info.cached_tokens(), info.length());
  EXPECT_GT(info.kv_bytes(), 0);
  EXPECT_TRUE(info.has_system_prompt());
  EXPECT_EQ(info.turns(), 0);

  const std::string empty_id = CreateSession(*engine);
  v1::Response empty = Call(*engine, GetRequest(empty_id));
  EXPECT_EQ(empty.get_session().session().length(), 0);
  EXPECT_FALSE(empty.get_session().session().has_system_prompt());
}

TEST(EngineTest, SystemPromptLongerThanTheContextIsRejected) {
  auto engine = StartEngine(kContext);
  std::string system;
  for (int i = 0; i < 40; ++i) system += niels::testing::TinyCorpus().at(0) + " ";
  EXPECT_EQ(ErrorOf(Call(*engine, CreateRequest(&system))), v1::INVALID_ARGUMENT);
  v1::Request list;
  list.mutable_list_sessions();
  EXPECT_EQ(Call(*engine, list).list_sessions().sessions_size(), 0);
}

// Every session request on an id: unknown -> NOT_FOUND, another uid's -> PERMISSION_DENIED.
std::vector<v1::Request> SessionRequests(const std::string& id) {
  std::vector<v1::Request> requests(6);
  requests[0] = GetRequest(id);
  requests[1] = ChatRequest(id, "hello", 2);
  requests[2] = GenerateRequest(id, {5}, 1);
  requests[3].mutable_fork_session()->set_session_id(id);
  requests[4].mutable_reset_session()->set_session_id(id);
  requests[5].mutable_delete_session()->set_session_id(id);
  return requests;
}

TEST(EngineTest, UnknownSessionIsNotFound) {
  auto engine = StartEngine(kContext);
  for (const v1::Request& request : SessionRequests("0123456789abcdef0123456789abcdef")) {
    EXPECT_EQ(ErrorOf(Call(*engine, request)), v1::NOT_FOUND) << request.DebugString();
  }
}

TEST(EngineTest, OtherUsersSessionsAreDeniedAndNotListed) {
  auto engine = StartEngine(kContext);
  const std::string id = CreateSession(*engine);
  for (const v1::Request& request : SessionRequests(id)) {
    EXPECT_EQ(ErrorOf(Call(*engine, request, kOtherUid)), v1::PERMISSION_DENIED) << request.DebugString();
    EXPECT_EQ(ErrorOf(Call(*engine, request, 0)), v1::PERMISSION_DENIED) << "root without allow_root";
  }
  v1::Request list;
  list.mutable_list_sessions();
  EXPECT_EQ(Call(*engine, list, kOtherUid).list_sessions().sessions_size(), 0);
  v1::Response own = Call(*engine, list);
  ASSERT_EQ(own.list_sessions().sessions_size(), 1);
  EXPECT_EQ(own.list_sessions().sessions(0).session_id(), id);
  EXPECT_TRUE(Call(*engine, GetRequest(id)).has_get_session());  // the owner still can
}

TEST(EngineTest, RootIsAllowedWhenConfigured) {
  EngineOptions options;
  options.session_limits.allow_root = true;
  auto engine = StartEngine(kContext, options);
  const std::string id = CreateSession(*engine);
  EXPECT_TRUE(Call(*engine, GetRequest(id), 0).has_get_session());
  EXPECT_EQ(ErrorOf(Call(*engine, GetRequest(id), kOtherUid)), v1::PERMISSION_DENIED);
}

TEST(EngineTest, MaxSessions) {
  EngineOptions options;
  options.session_limits.max_sessions = 2;
  auto engine = StartEngine(kContext, options);
  const std::string first = CreateSession(*engine);
  CreateSession(*engine);
  EXPECT_EQ(ErrorOf(Call(*engine, CreateRequest())), v1::RESOURCE_EXHAUSTED);
  v1::Request fork;
  fork.mutable_fork_session()->set_session_id(first);
  EXPECT_EQ(ErrorOf(Call(*engine, fork)), v1::RESOURCE_EXHAUSTED);
  v1::Request remove;
  remove.mutable_delete_session()->set_session_id(first);
  EXPECT_TRUE(Call(*engine, remove).has_delete_session());
  EXPECT_EQ(ErrorOf(Call(*engine, GetRequest(first))), v1::NOT_FOUND);
  EXPECT_TRUE(Call(*engine, CreateRequest()).has_create_session());
}

TEST(EngineTest, ResetReturnsToTheSystemPrompt) {
  auto engine = StartEngine(kContext);
  const std::string system = "be brief";
  const std::string id = CreateSession(*engine, &system);
  const v1::Response before = Call(*engine, GetRequest(id));
  ASSERT_TRUE(Call(*engine, ChatRequest(id, "hello there", 3)).has_chat());
  v1::Request reset;
  reset.mutable_reset_session()->set_session_id(id);
  v1::Response response = Call(*engine, reset);
  ASSERT_TRUE(response.has_reset_session()) << response.DebugString();
  EXPECT_EQ(response.reset_session().length(), before.get_session().session().length());
  const v1::Response after = Call(*engine, GetRequest(id));
  EXPECT_EQ(after.get_session().token_ids_size(), before.get_session().token_ids_size());
  EXPECT_TRUE(std::equal(after.get_session().token_ids().begin(), after.get_session().token_ids().end(),
                         before.get_session().token_ids().begin()));
  EXPECT_EQ(after.get_session().session().turns(), 0);
  EXPECT_EQ(after.get_session().session().cached_tokens(), before.get_session().session().length());
}

TEST(EngineTest, StatsCountSessionsAndTokens) {
  auto engine = StartEngine(kContext);
  const std::string id = CreateSession(*engine);
  v1::Response chat = Call(*engine, ChatRequest(id, "hello there", 4));
  ASSERT_TRUE(chat.has_chat()) << chat.DebugString();
  v1::Request stats_request;
  stats_request.mutable_stats();
  v1::Response response = Call(*engine, stats_request);
  ASSERT_TRUE(response.has_stats());
  const v1::StatsResponse& stats = response.stats();
  EXPECT_EQ(stats.sessions(), 1u);
  EXPECT_GT(stats.kv_bytes(), 0u);
  EXPECT_EQ(stats.requests_total(), 3u);  // create, chat, stats
  EXPECT_EQ(stats.tokens_generated_total(), static_cast<uint64_t>(chat.chat().stats().generated_tokens()));
  EXPECT_EQ(stats.tokens_prefilled_total(), static_cast<uint64_t>(chat.chat().stats().prefilled_tokens()));
  EXPECT_GE(stats.uptime_s(), 0.0);
}

TEST(EngineTest, FullQueueAndShutdown) {
  EngineOptions options;
  options.max_queue = 1;
  auto engine = StartEngine(kContext, options);
  const std::string id = CreateSession(*engine);
  auto blocking = std::make_shared<BlockingSink>();
  auto running_cancel = std::make_shared<std::atomic<bool>>(false);
  SubmitAsync(*engine, ChatRequest(id, "hello there", 8, true, /*stream=*/true), kUid, running_cancel, blocking);
  blocking->WaitEntered();  // the engine thread is now busy with the chat
  auto queued = SubmitAsync(*engine, GetRequest(id));
  auto refused = SubmitAsync(*engine, GetRequest(id));
  EXPECT_EQ(ErrorOf(refused->Wait()), v1::RESOURCE_EXHAUSTED);
  std::thread stopper([&] { engine->Shutdown(); });
  while (!running_cancel->load()) std::this_thread::yield();  // Shutdown flagged the running job
  blocking->Release();
  stopper.join();
  EXPECT_EQ(ErrorOf(blocking->Wait()), v1::CANCELLED);
  EXPECT_EQ(ErrorOf(queued->Wait()), v1::CANCELLED);
  EXPECT_EQ(ErrorOf(Call(*engine, GetRequest(id))), v1::UNAVAILABLE);
  engine->Shutdown();  // idempotent
  EXPECT_EQ(blocking->finals(), 1);
}

TEST(EngineTest, QueuedCancelledJobDoesNotRun) {
  auto engine = StartEngine(kContext);
  const std::string id = CreateSession(*engine);
  auto cancel = std::make_shared<std::atomic<bool>>(true);
  auto sink = SubmitAsync(*engine, ChatRequest(id, "hello there", 4), kUid, cancel);
  EXPECT_EQ(ErrorOf(sink->Wait()), v1::CANCELLED);
  EXPECT_TRUE(sink->events().empty());
  EXPECT_EQ(Call(*engine, GetRequest(id)).get_session().session().length(), 0);
}

TEST(EngineTest, QuickJobsAreServedBetweenDecodeSteps) {
  auto engine = StartEngine(kContext);
  const std::string busy = CreateSession(*engine);
  const std::string other = CreateSession(*engine);
  std::shared_ptr<RecordingSink> info, get_other, get_busy;
  bool others_done_by_second_event = false;
  bool busy_done_by_second_event = true;
  int events = 0;
  auto sink = std::make_shared<RecordingSink>();
  sink->on_event = [&](const v1::Response&) {  // on the engine thread
    if (++events == 1) {
      v1::Request info_request;
      info_request.mutable_info();
      info = SubmitAsync(*engine, info_request);
      get_other = SubmitAsync(*engine, GetRequest(other));
      get_busy = SubmitAsync(*engine, GetRequest(busy));
    } else if (events == 2) {
      others_done_by_second_event = info->finals() == 1 && get_other->finals() == 1;
      busy_done_by_second_event = get_busy->finals() == 1;
    }
    return true;
  };
  v1::Request chat = ChatRequest(busy, "hello there", 6, true, /*stream=*/true);
  chat.mutable_chat()->mutable_sampling()->add_banned_ids(LoadTinyModel(kContext)->special.eot);
  ASSERT_TRUE(SubmitAsync(*engine, chat, kUid, nullptr, sink)->Wait().has_chat());
  EXPECT_EQ(events, 6);
  EXPECT_TRUE(others_done_by_second_event);
  EXPECT_FALSE(busy_done_by_second_event);  // same session: waits for the turn to finish
  const v1::Response after = get_busy->Wait();
  ASSERT_TRUE(after.has_get_session());
  EXPECT_EQ(after.get_session().session().turns(), 1);
}

TEST(EngineTest, KvBudgetDropsIdleCachesAndTheirNextTurnsStillEqualAnUnlimitedRun) {
  // A pool of 6 blocks (96 positions): about one session's cache at a time.
  auto model = LoadTinyModel(kContext);
  const uint64_t block = 2ull * model->config.layers * model->config.width * sizeof(float) * 16;
  EngineOptions small;
  small.kv_budget_bytes = 6 * ((block + 4095) / 4096 * 4096);
  auto engine = StartEngine(kContext, small);
  auto unlimited = StartEngine(kContext);
  // The same chats on both engines: a, b (which needs a's blocks), then a again.
  std::vector<v1::Response> replies[2];
  for (int e = 0; e < 2; ++e) {
    Service& service = e == 0 ? *engine : *unlimited;
    const std::string a = CreateSession(service);
    const std::string b = CreateSession(service);
    replies[e].push_back(Call(service, ChatRequest(a, "hello there, how are you doing today?", 24)));
    replies[e].push_back(Call(service, ChatRequest(b, "tell me something about the socket of nielsd", 24)));
    if (e == 0) {
      const v1::Response idle = Call(service, GetRequest(a));
      EXPECT_EQ(idle.get_session().session().cached_tokens(), 0);  // dropped for b
      EXPECT_EQ(idle.get_session().session().length(), replies[e][0].chat().session_length());  // history kept
    }
    replies[e].push_back(Call(service, ChatRequest(a, "and again, please", 8)));
  }
  for (size_t k = 0; k < replies[0].size(); ++k) {
    ASSERT_TRUE(replies[0][k].has_chat()) << replies[0][k].DebugString();
    EXPECT_EQ(replies[0][k].chat().reply_ids_size(), replies[1][k].chat().reply_ids_size());
    for (int i = 0; i < replies[0][k].chat().reply_ids_size(); ++i) {
      EXPECT_EQ(replies[0][k].chat().reply_ids(i), replies[1][k].chat().reply_ids(i)) << "reply " << k;
    }
  }
  const v1::GenerationStats& again = replies[0][2].chat().stats();
  EXPECT_EQ(again.prefilled_tokens() + again.reused_tokens(), again.prompt_tokens());
  EXPECT_EQ(again.reused_tokens() % 16, 0);  // whole blocks the pool still had, if any
  v1::Request stats;
  stats.mutable_stats();
  EXPECT_LE(Call(*engine, stats).stats().kv_bytes(), small.kv_budget_bytes);
}

TEST(EngineTest, RequestLargerThanTheKvBudgetIsRefused) {
  EngineOptions options;
  options.kv_budget_bytes = 1024;  // less than a few tokens
  auto engine = StartEngine(kContext, options);
  const std::string id = CreateSession(*engine);
  EXPECT_EQ(ErrorOf(Call(*engine, ChatRequest(id, "hello there", 4))), v1::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Call(*engine, GetRequest(id)).get_session().session().length(), 0);
  // The uncached path needs no cache and still works.
  EXPECT_TRUE(Call(*engine, ChatRequest(id, "hello there", 4, /*use_kv_cache=*/false)).has_chat());
}

TEST(EngineTest, MakeEngineReportsABadModelDirectory) {
  niels::testing::TempDir empty("niels_engine_bad_");
  auto engine = MakeService(empty.path(), EngineOptions{});
  EXPECT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("config.json"), std::string::npos) << engine.status().ToString();
}

}  // namespace service_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
