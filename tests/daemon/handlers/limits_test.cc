// Engine: what keeps one user from hurting another (per-uid queue share, round robin between uids,
// per-uid session limits, KV fair share, idle-session expiry) and the per-session order of requests.
// Each test fails on an engine without the rule it checks.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/engine/engine.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace limits_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 64;

std::string CreateSession(Service& engine, uint32_t uid = kUid) {
  v1::Response response = Call(engine, CreateRequest(), uid);
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

v1::Request SessionRequest(const std::string& id, int which) {
  v1::Request request;
  switch (which) {
    case 0: request.mutable_get_session()->set_session_id(id); break;
    case 1: request.mutable_fork_session()->set_session_id(id); break;
    case 2: request.mutable_reset_session()->set_session_id(id); break;
    default: request.mutable_delete_session()->set_session_id(id); break;
  }
  return request;
}

int32_t EotId() {
  static const int32_t eot = LoadTinyModel(kContext)->special.eot;
  return eot;
}

// Holds the engine thread inside a streamed chat of `uid` until Release() (see BlockingSink). The
// chat cannot end early (eot banned), so after Release() it runs several more decode steps.
struct HeldEngine {
  std::shared_ptr<BlockingSink> sink = std::make_shared<BlockingSink>();
  HeldEngine(Service& engine, uint32_t uid) {
    const std::string id = CreateSession(engine, uid);
    v1::Request chat = ChatRequest(id, "hello there", 8, true, /*stream=*/true);
    chat.mutable_chat()->mutable_sampling()->add_banned_ids(EotId());
    SubmitAsync(engine, chat, uid, nullptr, sink);
    sink->WaitEntered();
  }
  void Release() {
    sink->Release();
    sink->Wait();
  }
};

// While session A generates, a Chat on B followed at once by a quick request on B: the quick
// request must see B after the chat (it used to overtake it between A's decode steps).
TEST(EngineOrderTest, QuickRequestsWaitForTheQueuedTurnOnTheirSession) {
  for (int which = 0; which < 4; ++which) {
    SCOPED_TRACE(which);
    auto engine = StartEngine(kContext);
    const std::string b = CreateSession(*engine);
    HeldEngine held(*engine, kUid);
    auto chat = SubmitAsync(*engine, ChatRequest(b, "hello there", 3));
    auto quick = SubmitAsync(*engine, SessionRequest(b, which));
    held.Release();
    const v1::Response chat_done = chat->Wait();
    ASSERT_TRUE(chat_done.has_chat()) << chat_done.DebugString();
    const v1::Response quick_done = quick->Wait();
    switch (which) {
      case 0:
        ASSERT_TRUE(quick_done.has_get_session()) << quick_done.DebugString();
        EXPECT_EQ(quick_done.get_session().session().length(), chat_done.chat().session_length());
        EXPECT_EQ(quick_done.get_session().session().turns(), 1);
        break;
      case 1: {
        ASSERT_TRUE(quick_done.has_fork_session()) << quick_done.DebugString();
        const v1::Response fork = Call(*engine, GetRequest(quick_done.fork_session().session_id()));
        EXPECT_EQ(fork.get_session().session().length(), chat_done.chat().session_length());
        break;
      }
      case 2:
        ASSERT_TRUE(quick_done.has_reset_session()) << quick_done.DebugString();
        EXPECT_EQ(Call(*engine, GetRequest(b)).get_session().session().length(), 0);
        break;
      default:
        ASSERT_TRUE(quick_done.has_delete_session()) << quick_done.DebugString();
        EXPECT_EQ(ErrorOf(Call(*engine, GetRequest(b))), v1::NOT_FOUND);
        break;
    }
  }
}

// Records the order in which final responses are sent (on the engine thread).
struct OrderedSink : RecordingSink {
  explicit OrderedSink(std::atomic<int>& counter) : counter(counter) {}
  bool Send(v1::Response response, bool final) override {
    if (final) position = counter++;
    return RecordingSink::Send(std::move(response), final);
  }
  std::atomic<int>& counter;
  std::atomic<int> position{-1};
};

// Two users: one floods the queue with long requests, the other's single request runs next after
// the one in progress instead of after the whole flood.
TEST(EngineFairnessTest, UidsTakeTurnsInTheQueue) {
  EngineOptions options;
  // One turn at a time, so that the order of admission shows in the order of the finals (with a
  // batch all six chats would run together; scheduler_test covers that).
  options.max_batch = 1;
  auto engine = StartEngine(kContext, options);
  constexpr uint32_t kFlooder = 2000;
  constexpr uint32_t kPolite = 2001;
  std::vector<std::string> flood_sessions;
  for (int i = 0; i < 5; ++i) flood_sessions.push_back(CreateSession(*engine, kFlooder));
  const std::string polite_session = CreateSession(*engine, kPolite);
  HeldEngine held(*engine, 1999);
  std::atomic<int> finished{0};
  std::vector<std::shared_ptr<OrderedSink>> flood;
  for (const std::string& id : flood_sessions) {
    flood.push_back(std::make_shared<OrderedSink>(finished));
    SubmitAsync(*engine, ChatRequest(id, "hello there", 6), kFlooder, nullptr, flood.back());
  }
  auto polite = std::make_shared<OrderedSink>(finished);
  SubmitAsync(*engine, ChatRequest(polite_session, "hello there", 6), kPolite, nullptr, polite);
  held.Release();
  ASSERT_TRUE(polite->Wait().has_chat());
  for (auto& sink : flood) EXPECT_TRUE(sink->Wait().has_chat());
  // Finals in order: the flooder's first chat, then the polite one (FIFO would put it last).
  EXPECT_EQ(polite->position.load(), 1) << "the polite user waited behind the flood";
}

TEST(EngineLimitsTest, QueueShareIsPerUid) {
  EngineOptions options;
  options.max_queued_per_uid = 2;
  auto engine = StartEngine(kContext, options);
  const std::string own = CreateSession(*engine);
  const std::string theirs = CreateSession(*engine, kOtherUid);
  HeldEngine held(*engine, 1999);
  auto first = SubmitAsync(*engine, ChatRequest(own, "one", 2));
  auto second = SubmitAsync(*engine, GetRequest(own));
  auto refused = SubmitAsync(*engine, GetRequest(own));
  const v1::Response refusal = refused->Wait();
  EXPECT_EQ(ErrorOf(refusal), v1::RESOURCE_EXHAUSTED);
  EXPECT_NE(refusal.error().message().find("--max-queued-per-uid"), std::string::npos) << refusal.DebugString();
  auto other_user = SubmitAsync(*engine, GetRequest(theirs), kOtherUid);  // their own share is free
  held.Release();
  EXPECT_TRUE(first->Wait().has_chat());
  EXPECT_TRUE(second->Wait().has_get_session());
  EXPECT_TRUE(other_user->Wait().has_get_session());
}

TEST(EngineLimitsTest, SessionLimitIsPerUid) {
  EngineOptions options;
  options.session_limits.max_sessions_per_uid = 3;
  auto engine = StartEngine(kContext, options);
  std::vector<std::string> own;
  for (int i = 0; i < 3; ++i) own.push_back(CreateSession(*engine));
  const v1::Response refused = Call(*engine, CreateRequest());
  EXPECT_EQ(ErrorOf(refused), v1::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error().message().find("--max-sessions-per-uid"), std::string::npos);
  EXPECT_EQ(ErrorOf(Call(*engine, SessionRequest(own[0], 1))), v1::RESOURCE_EXHAUSTED);  // fork counts
  // Another user is not affected.
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(CreateSession(*engine, kOtherUid).empty());
  // Deleting one makes room again.
  ASSERT_TRUE(Call(*engine, SessionRequest(own[0], 3)).has_delete_session());
  EXPECT_TRUE(Call(*engine, SessionRequest(own[1], 1)).has_fork_session());
}

TEST(EngineLimitsTest, IdleSessionsExpire) {
  EngineOptions options;
  options.idle_session_timeout = std::chrono::milliseconds(400);
  auto engine = StartEngine(kContext, options);
  const std::string idle = CreateSession(*engine);
  const std::string used = CreateSession(*engine);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1500)) {
    ASSERT_TRUE(Call(*engine, GetRequest(used)).has_get_session());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(ErrorOf(Call(*engine, GetRequest(idle))), v1::NOT_FOUND);
  // The expired session no longer counts against the limits, and Stats counts the expiry.
  v1::Request stats;
  stats.mutable_stats();
  const v1::Response answered = Call(*engine, stats);
  EXPECT_EQ(answered.stats().sessions(), 1u);
  EXPECT_EQ(answered.stats().sessions_expired_total(), 1u);
}

TEST(EngineLimitsTest, ZeroTimeoutKeepsSessions) {
  EngineOptions options;
  options.idle_session_timeout = std::chrono::milliseconds(0);
  auto engine = StartEngine(kContext, options);
  const std::string id = CreateSession(*engine);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(Call(*engine, GetRequest(id)).has_get_session());
}

// One user cycling through many sessions evicts their own caches, not another user's.
TEST(EngineLimitsTest, KvEvictionTakesFromUsersOverTheirShare) {
  auto model = LoadTinyModel(kContext);
  const uint64_t chunk = 2ull * model->config.layers * model->config.width * sizeof(float) * 64;
  EngineOptions options;
  options.kv_budget_bytes = 3 * chunk;  // three sessions' caches
  auto engine = StartEngine(kContext, options);
  const std::string quiet = CreateSession(*engine, kOtherUid);
  ASSERT_TRUE(Call(*engine, ChatRequest(quiet, "hello there", 3), kOtherUid).has_chat());
  std::vector<std::string> busy;
  for (int i = 0; i < 4; ++i) busy.push_back(CreateSession(*engine));
  for (int round = 0; round < 2; ++round) {
    for (const std::string& id : busy) ASSERT_TRUE(Call(*engine, ChatRequest(id, "hi", 2)).has_chat());
  }
  const v1::Response quiet_state = Call(*engine, GetRequest(quiet), kOtherUid);
  EXPECT_GT(quiet_state.get_session().session().cached_tokens(), 0) << "the quiet user's cache was evicted";
  const v1::Response again = Call(*engine, ChatRequest(quiet, "and again", 2), kOtherUid);
  ASSERT_TRUE(again.has_chat());
  EXPECT_GT(again.chat().stats().reused_tokens(), 0);
}

TEST(EngineLimitsTest, HugeSessionIdsAreNotEchoedWhole) {
  auto engine = StartEngine(kContext);
  const std::string huge(4u << 20, 'a');
  for (int which = 0; which < 4; ++which) {
    const v1::Response response = Call(*engine, SessionRequest(huge, which));
    EXPECT_EQ(ErrorOf(response), v1::NOT_FOUND);
    EXPECT_LT(response.error().message().size(), 200u);
    EXPECT_NE(response.error().message().find("4194304 bytes"), std::string::npos) << response.error().message();
  }
}

}  // namespace limits_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
