// DurableStore: the per-user stored-session limit, background expiry that leaves loaded sessions
// to the engine, and spill files of vanished sessions dropped at open.
#include "daemon/state/durable_store.h"

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/temp_files.h"

namespace niels::daemon::state {
namespace {

namespace fs = std::filesystem;
using ::testing::UnorderedElementsAre;

constexpr const char* kFingerprint = "0123456789abcdef0123456789abcdef";

double Now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

StoredSession Session(const std::string& id, uint32_t owner, double last_used) {
  StoredSession s;
  s.summary.id = id;
  s.summary.owner = owner;
  s.summary.model_fingerprint = kFingerprint;
  s.summary.model_name = "tiny";
  s.summary.created_unix_s = last_used;
  s.summary.last_used_unix_s = last_used;
  s.history.tokens = {1, 2, 3};
  s.history.system_end = 1;
  s.history.turns = {{1, 3}};
  s.summary.length = 3;
  s.summary.turn_count = 1;
  return s;
}

DurableStoreOptions Options(const fs::path& dir) {
  DurableStoreOptions options;
  options.dir = dir;
  options.model_fingerprint = kFingerprint;
  options.model_name = "tiny";
  return options;
}

TEST(DurableStoreTest, PerUserLimitDropsThatUsersLeastRecentlyUsedIdleSession) {
  testing::TempDir dir;
  DurableStoreOptions options = Options(dir.path());
  options.max_stored_sessions_per_uid = 3;
  auto store = DurableStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  DurableStore& s = **store;
  const double t = Now();  // recent: the background expiry leaves them alone
  std::vector<std::string> evicted;
  ASSERT_TRUE(s.Create(Session("a1", 1, t + 10), &evicted).ok());
  ASSERT_TRUE(s.Create(Session("a2", 1, t + 30), &evicted).ok());
  ASSERT_TRUE(s.Create(Session("a3", 1, t + 20), &evicted).ok());
  ASSERT_TRUE(s.Create(Session("b1", 2, t + 1), &evicted).ok());  // another user's oldest: never a victim
  EXPECT_TRUE(evicted.empty());
  s.MarkLoaded("a1");  // in memory: left alone
  ASSERT_TRUE(s.Create(Session("a4", 1, t + 40), &evicted).ok());
  EXPECT_EQ(evicted, (std::vector<std::string>{"a3"}));
  EXPECT_FALSE(s.Load("a3").value().has_value());
  EXPECT_TRUE(s.Load("b1").value().has_value());
  EXPECT_EQ(s.Count().value(), 4);
  s.MarkLoaded("a2");
  s.MarkLoaded("a4");
  const common::Status full = s.Create(Session("a5", 1, t + 50), &evicted);
  EXPECT_EQ(full.code(), common::StatusCode::kResourceExhausted);
  EXPECT_FALSE(s.Load("a5").value().has_value());
}

TEST(DurableStoreTest, BackgroundExpiryDeletesIdleUnloadedSessionsAndTheirSpillFiles) {
  testing::TempDir dir;
  DurableStoreOptions options = Options(dir.path());
  options.session_ttl_s = 60;
  options.maintenance_interval_s = 0.02;
  auto store = DurableStore::Open(options);
  ASSERT_TRUE(store.ok());
  DurableStore& s = **store;
  const double now = Now();
  s.MarkLoaded("loaded");
  // old1's spill file first: the maintenance thread may expire old1 as soon as it exists.
  testing::WriteFile(s.spill().PathFor("old1"), "kv");
  s.spill().Add("old1", 2);
  for (const char* id : {"old1", "old2", "loaded"}) ASSERT_TRUE(s.Create(Session(id, 1, now - 3600), nullptr).ok());
  ASSERT_TRUE(s.Create(Session("recent", 1, now), nullptr).ok());

  std::vector<std::string> expired;
  for (int i = 0; i < 500 && expired.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (std::string& id : s.TakeExpired()) expired.push_back(std::move(id));
  }
  EXPECT_THAT(expired, UnorderedElementsAre("old1", "old2"));
  EXPECT_FALSE(fs::exists(s.spill().PathFor("old1")));
  EXPECT_TRUE(s.Load("loaded").value().has_value());  // the engine expires what it has loaded
  EXPECT_TRUE(s.Load("recent").value().has_value());
}

TEST(DurableStoreTest, TouchKeepsASessionFromExpiring) {
  testing::TempDir dir;
  DurableStoreOptions options = Options(dir.path());
  options.maintenance_interval_s = 3600;  // only the run at start
  {
    // Written with a TTL that the hour-old session is within, so that this store's own start-up
    // maintenance run (on its thread, at any moment) cannot expire it before the Touch.
    DurableStoreOptions writing = options;
    writing.session_ttl_s = 7200;
    auto store = DurableStore::Open(writing);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Create(Session("s", 1, Now() - 3600), nullptr).ok());
    ASSERT_TRUE((*store)->Touch("s", Now()).ok());
    EXPECT_EQ((*store)->Touch("gone", Now()).code(), common::StatusCode::kNotFound);
  }
  options.session_ttl_s = 60;  // the session was created an hour ago, but touched just now
  auto reopened = DurableStore::Open(options);  // its start-up maintenance run expires nothing
  ASSERT_TRUE(reopened.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE((*reopened)->TakeExpired().empty());
  EXPECT_TRUE((*reopened)->Load("s").value().has_value());
  EXPECT_LE((*reopened)->touch_slack_s(), 60.0 / 8);
}

TEST(DurableStoreTest, OpenDropsSpillFilesOfVanishedOrOtherModelSessions) {
  testing::TempDir dir;
  DurableStoreOptions options = Options(dir.path());
  {
    auto store = DurableStore::Open(options);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Create(Session("kept", 1, Now()), nullptr).ok());
    StoredSession other = Session("other", 1, Now());
    other.summary.model_fingerprint = "ffffffffffffffffffffffffffffffff";
    ASSERT_TRUE((*store)->Create(other, nullptr).ok());
    EXPECT_FALSE((*store)->IsThisModel(other.summary));
  }
  for (const char* id : {"kept", "other", "deleted"}) testing::WriteFile(dir / "kv" / (std::string(id) + ".kv"), "x");
  auto store = DurableStore::Open(options);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(fs::exists(dir / "kv" / "kept.kv"));
  EXPECT_FALSE(fs::exists(dir / "kv" / "other.kv"));
  EXPECT_FALSE(fs::exists(dir / "kv" / "deleted.kv"));
  EXPECT_EQ((*store)->spill().file_count(), 1u);
}

}  // namespace
}  // namespace niels::daemon::state
