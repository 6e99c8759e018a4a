// Session and SessionStore: snapshots, turn dropping, forks, ownership, limits, the KV budget.
#include "daemon/engine/session.h"

#include <set>

#include <gtest/gtest.h>

#include "daemon/kernels/simd_kernels.h"
#include "daemon/engine/session_store.h"
#include "tests/support/test_model.h"

namespace niels::daemon::engine {
namespace {

model::ModelConfig SmallConfig() {
  model::ModelConfig config;
  config.vocab_size = 50;
  config.context = 256;
  config.width = 8;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 16;
  return config;
}

// Writes `value` into every element of positions [first, first + n) of the cache's keys (and
// -value into its values) of `layer`, through the storage view as the kernels write.
void WriteRows(model::KvCache& cache, const model::ModelConfig& config, int64_t layer, int64_t first, int64_t n,
               float value) {
  const kernels::KvView view = cache.View();
  const int64_t D = config.head_dim(), element = kernels::DtypeSize(view.dtype);
  const std::vector<float> keys(D, value), values(D, -value);
  for (int64_t h = 0; h < config.heads; ++h) {
    for (int64_t p = first; p < first + n; ++p) {
      const int64_t offset = (h * view.capacity + p) * D * element;
      kernels::simd::FromFloat(keys.data(), D, view.dtype, static_cast<std::byte*>(view.keys[layer]) + offset);
      kernels::simd::FromFloat(values.data(), D, view.dtype, static_cast<std::byte*>(view.values[layer]) + offset);
    }
  }
}

// Appends n positions of recognisable values (position * 1000 + layer) to the cache.
void FillCache(model::KvCache& cache, const model::ModelConfig& config, int64_t n) {
  const int64_t start = cache.length();
  cache.Reserve(n);
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    for (int64_t p = start; p < start + n; ++p) WriteRows(cache, config, layer, p, 1, p * 1000.0f + layer);
  }
  cache.Advance(n);
}

// Grows the session's history by n tokens and caches them all.
void Grow(Session& session, const model::ModelConfig& config, int64_t n, int32_t id) {
  for (int64_t i = 0; i < n; ++i) session.sequence().tokens.push_back(id);
  FillCache(session.sequence().cache, config, session.length() - session.cached_tokens());
}

class SessionTest : public ::testing::Test {};
using SessionStoreTest = SessionTest;

TEST(SessionIdTest, Is32LowercaseHexAndUnique) {
  std::set<std::string> ids;
  for (int i = 0; i < 200; ++i) {
    const std::string id = NewSessionId();
    ASSERT_EQ(id.size(), 32u);
    for (char c : id) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 200u);
}

TEST_F(SessionTest, RestoreUndoesGrowth) {
  const model::ModelConfig config = SmallConfig();
  Session session("a", 1, config);
  session.SetSystemPrompt({1, 2, 3});
  FillCache(session.sequence().cache, config, 3);
  session.AddTurn({3, 3});  // an empty turn span is fine for the bookkeeping
  Session::Snapshot snapshot = session.TakeSnapshot();
  const std::vector<int32_t> before = session.tokens();
  Grow(session, config, 10, 7);
  session.AddTurn({3, 13});
  session.Restore(std::move(snapshot));
  EXPECT_EQ(session.tokens(), before);
  EXPECT_EQ(session.cached_tokens(), 3);
  EXPECT_EQ(session.turns().size(), 1u);
}

TEST_F(SessionTest, RestoreBringsBackAStashedCache) {
  const model::ModelConfig config = SmallConfig();
  Session session("a", 1, config);
  Grow(session, config, 5, 4);
  const std::vector<float> keys = session.sequence().cache.KeysAsFloats(1, 5);
  Session::Snapshot snapshot = session.TakeSnapshot();
  session.StashCache(snapshot);
  EXPECT_EQ(session.cached_tokens(), 0);
  Grow(session, config, 2, 9);
  session.Restore(std::move(snapshot));
  EXPECT_EQ(session.length(), 5);
  ASSERT_EQ(session.cached_tokens(), 5);
  EXPECT_EQ(session.sequence().cache.KeysAsFloats(1, 5), keys);
}

TEST_F(SessionTest, DropOldestTurnsKeepsSystemPromptAndShiftsTurns) {
  const model::ModelConfig config = SmallConfig();
  Session session("a", 1, config);
  session.SetSystemPrompt({1, 1});
  for (int32_t turn = 0; turn < 3; ++turn) {
    const int64_t begin = session.length();
    Grow(session, config, 4, 10 + turn);
    session.AddTurn({begin, session.length()});
  }
  ASSERT_EQ(session.length(), 14);
  EXPECT_EQ(session.LengthWithoutOldestTurns(0), 14);
  EXPECT_EQ(session.LengthWithoutOldestTurns(2), 6);
  Session::Snapshot snapshot = session.TakeSnapshot();
  session.DropOldestTurns(2, snapshot);
  EXPECT_EQ(session.tokens(), (std::vector<int32_t>{1, 1, 12, 12, 12, 12}));
  ASSERT_EQ(session.turns().size(), 1u);
  EXPECT_EQ(session.turns()[0], (TokenSpan{2, 6}));
  EXPECT_EQ(session.cached_tokens(), 2);  // only the system prompt's positions stay valid
  session.Restore(std::move(snapshot));
  EXPECT_EQ(session.length(), 14);
  EXPECT_EQ(session.cached_tokens(), 14);
  EXPECT_EQ(session.turns().size(), 3u);
}

TEST_F(SessionTest, ResetKeepsOnlyTheSystemPrompt) {
  const model::ModelConfig config = SmallConfig();
  Session session("a", 1, config);
  session.SetSystemPrompt({5, 6, 7});
  Grow(session, config, 3, 0);
  Grow(session, config, 4, 9);
  session.AddTurn({3, 7});
  session.Reset();
  EXPECT_EQ(session.tokens(), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(session.cached_tokens(), 3);
  EXPECT_TRUE(session.turns().empty());
  EXPECT_TRUE(session.has_system_prompt());
}

TEST_F(SessionTest, ForkSharesNothingMutable) {
  const model::ModelConfig config = SmallConfig();
  Session parent("a", 1, config);
  parent.SetSystemPrompt({3});
  Grow(parent, config, 6, 2);
  std::unique_ptr<Session> fork = parent.Fork("b", 1, /*with_cache=*/true);
  EXPECT_EQ(fork->tokens(), parent.tokens());
  ASSERT_EQ(fork->cached_tokens(), parent.cached_tokens());
  EXPECT_EQ(fork->sequence().cache.KeysAsFloats(0, 7), parent.sequence().cache.KeysAsFloats(0, 7));
  // Writing into the fork's cache storage leaves the parent's untouched.
  WriteRows(fork->sequence().cache, config, 0, 0, 7, -1.0f);
  fork->sequence().cache.Truncate(2);
  Grow(*fork, config, 5, 8);
  EXPECT_EQ(parent.length(), 7);
  EXPECT_EQ(parent.cached_tokens(), 7);
  EXPECT_EQ(parent.sequence().cache.KeysAsFloats(0, 7)[6 * config.head_dim()], 6000.0f);  // head 0, position 6
  std::unique_ptr<Session> bare = parent.Fork("c", 2, /*with_cache=*/false);
  EXPECT_EQ(bare->cached_tokens(), 0);
  EXPECT_EQ(bare->owner(), 2u);
  EXPECT_EQ(bare->system_end(), 1);
}

TEST_F(SessionStoreTest, OwnershipAndListing) {
  SessionStore store(SmallConfig(), SessionStoreOptions{});
  Session* mine = store.Create(1000).value();
  Session* theirs = store.Create(2000).value();
  EXPECT_TRUE(store.Find(mine->id(), 1000).ok());
  EXPECT_EQ(store.Find(mine->id(), 2000).status().code(), common::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Find(mine->id(), 0).status().code(), common::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Find("00000000000000000000000000000000", 1000).status().code(), common::StatusCode::kNotFound);
  EXPECT_EQ(store.Delete(theirs->id(), 1000).code(), common::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Fork(theirs->id(), 1000).status().code(), common::StatusCode::kPermissionDenied);
  ASSERT_EQ(store.List(1000).size(), 1u);
  EXPECT_EQ(store.List(1000)[0], mine);
  EXPECT_TRUE(store.List(3000).empty());
  EXPECT_TRUE(store.Delete(theirs->id(), 2000).ok());
  EXPECT_EQ(store.size(), 1u);
}

TEST_F(SessionStoreTest, RootOnlyWhenAllowed) {
  SessionStore store(SmallConfig(), SessionStoreOptions{.max_sessions = 64, .kv_budget_bytes = 1ull << 30, .allow_root = true});
  Session* mine = store.Create(1000).value();
  EXPECT_TRUE(store.Find(mine->id(), 0).ok());
  EXPECT_TRUE(store.List(0).empty());  // listing stays own-only
}

TEST_F(SessionStoreTest, MaxSessions) {
  SessionStore store(SmallConfig(), SessionStoreOptions{.max_sessions = 2, .kv_budget_bytes = 1ull << 30});
  Session* first = store.Create(1).value();
  ASSERT_TRUE(store.Create(1).ok());
  EXPECT_EQ(store.Create(1).status().code(), common::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.Fork(first->id(), 1).status().code(), common::StatusCode::kResourceExhausted);
}

TEST_F(SessionStoreTest, BudgetDropsLeastRecentlyUsedCachesFirst) {
  const model::ModelConfig config = SmallConfig();
  SessionStore probe(config, SessionStoreOptions{});
  // Measure what one 64-token cache occupies, then allow three of them.
  Session* sizing = probe.Create(1).value();
  Grow(*sizing, config, 64, 1);
  const uint64_t one = static_cast<uint64_t>(sizing->kv_bytes());
  ASSERT_GE(one, probe.BytesForTokens(64));

  SessionStore store(config, SessionStoreOptions{.max_sessions = 64, .kv_budget_bytes = 3 * one});
  std::vector<Session*> sessions;
  for (int i = 0; i < 3; ++i) {
    sessions.push_back(store.Create(1).value());
    Grow(*sessions.back(), config, 64, 1);
  }
  ASSERT_TRUE(store.Find(sessions[0]->id(), 1).ok());  // 0 is now more recent than 1 and 2
  Session* fourth = store.Create(1).value();
  ASSERT_TRUE(store.Reserve(fourth, one).ok());
  EXPECT_EQ(sessions[1]->cached_tokens(), 0);   // least recently used: dropped
  EXPECT_EQ(sessions[1]->length(), 64);         // its history stays
  EXPECT_EQ(sessions[0]->cached_tokens(), 64);
  EXPECT_EQ(sessions[2]->cached_tokens(), 64);
  EXPECT_EQ(store.evictions(), 1u);
  EXPECT_EQ(store.Reserve(fourth, 4 * one).code(), common::StatusCode::kResourceExhausted);
  EXPECT_EQ(sessions[0]->cached_tokens(), 64);  // a refused reservation drops nothing

  // The session being generated on is never dropped for another one.
  store.MarkBusy(sessions[2], 0);
  ASSERT_TRUE(store.Find(sessions[0]->id(), 1).ok());  // 2 is now the least recently used
  ASSERT_TRUE(store.Reserve(fourth, 2 * one).ok());
  EXPECT_EQ(sessions[2]->cached_tokens(), 64);
  EXPECT_EQ(sessions[0]->cached_tokens(), 0);
}

TEST_F(SessionStoreTest, AdmissionWaitsForMemoryHeldByRunningTurns) {
  const model::ModelConfig config = SmallConfig();
  SessionStore store(config, SessionStoreOptions{.kv_budget_bytes = 1000});
  Session* a = store.Create(1).value();
  Session* b = store.Create(1).value();
  Session* c = store.Create(1).value();
  bool wait = true;
  ASSERT_TRUE(store.Admit(a, 600, &wait).ok());
  EXPECT_FALSE(wait);
  EXPECT_TRUE(store.IsBusy(a));
  ASSERT_TRUE(store.Admit(b, 500, &wait).ok());
  EXPECT_TRUE(wait) << "600 reserved by a running turn + 500 > 1000: wait";
  EXPECT_FALSE(store.IsBusy(b));
  ASSERT_TRUE(store.Admit(c, 400, &wait).ok());
  EXPECT_FALSE(wait) << "600 + 400 fits";
  EXPECT_EQ(store.Admit(b, 1001, &wait).code(), common::StatusCode::kResourceExhausted)
      << "more than the whole budget never fits: refused at once";
  store.ClearBusy(a);
  ASSERT_TRUE(store.Admit(b, 500, &wait).ok());
  EXPECT_FALSE(wait) << "a's turn ended: its memory is free for b";
}

}  // namespace
}  // namespace niels::daemon::engine
