// Session, SessionRegistry and KvBudget: snapshots, turn dropping, forks, ownership, limits, the KV
// budget, durable sessions and KV spill.
#include "daemon/sessions/session.h"

#include <chrono>
#include <set>

#include <gtest/gtest.h>

#include "daemon/sessions/kv_budget.h"
#include "daemon/sessions/session_registry.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_model.h"

namespace niels::daemon::sessions {
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

// Appends `tokens` to the cache with recognisable keys (position * 1000 + layer, values negated),
// as the forward pass would (PrepareWrite, write, Commit).
void FillCache(model::KvCache& cache, std::span<const int32_t> tokens) {
  model::KvPool& pool = cache.pool();
  const int64_t start = cache.length();
  ASSERT_TRUE(cache.PrepareWrite(static_cast<int64_t>(tokens.size())));
  for (int64_t p = start; p < start + static_cast<int64_t>(tokens.size()); ++p) {
    auto* block = static_cast<float*>(pool.data(cache.block_ids()[p / model::KvPool::kBlockTokens]));
    for (int64_t layer = 0; layer < pool.layers(); ++layer) {
      for (int64_t h = 0; h < pool.heads(); ++h) {
        for (int64_t d = 0; d < pool.head_dim(); ++d) {
          block[pool.BlockOffset(layer, 0, h, p % model::KvPool::kBlockTokens) + d] = static_cast<float>(p * 1000 + layer);
          block[pool.BlockOffset(layer, 1, h, p % model::KvPool::kBlockTokens) + d] = -static_cast<float>(p * 1000 + layer);
        }
      }
    }
  }
  cache.Commit(tokens);
}

// Grows the session's history by n tokens `id` and caches them all.
void Grow(Session& session, const model::ModelConfig&, int64_t n, int32_t id) {
  for (int64_t i = 0; i < n; ++i) session.sequence().tokens.push_back(id);
  const std::vector<int32_t>& tokens = session.sequence().tokens;
  FillCache(session.sequence().cache, std::span<const int32_t>(tokens).subspan(session.cached_tokens()));
}

// The bytes of a pool of `blocks` blocks of `config`'s shape.
uint64_t PoolBytes(const model::ModelConfig& config, int64_t blocks) {
  const int64_t per_sequence = (config.context + model::KvPool::kBlockTokens - 1) / model::KvPool::kBlockTokens;
  return model::KvPool::BytesForOneSequence(config) / static_cast<uint64_t>(per_sequence) * static_cast<uint64_t>(blocks);
}

// A pool with room for 64 blocks of `config`'s shape.
std::shared_ptr<model::KvPool> TestPool(const model::ModelConfig& config) {
  return std::make_shared<model::KvPool>(config, PoolBytes(config, 64));
}

// The sessions room as the engine assembles it (EngineState): a spiller, a registry and the KV
// budget on one pool.
struct Sessions {
  Sessions(const model::ModelConfig& config, uint64_t kv_budget_bytes, SessionLimits limits = {},
           state::DurableStore* durable = nullptr)
      : spiller(config, kernels::Dtype::kF32, durable),
        registry(std::make_shared<model::KvPool>(config, kv_budget_bytes), limits, spiller, durable),
        budget(registry, spiller) {}
  KvSpiller spiller;
  SessionRegistry registry;
  KvBudget budget;
};

class SessionTest : public ::testing::Test {};
using SessionRegistryTest = SessionTest;

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
  Session session("a", 1, TestPool(config));
  session.SetSystemPrompt({1, 2, 3});
  FillCache(session.sequence().cache, session.tokens());
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
  Session session("a", 1, TestPool(config));
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
  Session session("a", 1, TestPool(config));
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
  EXPECT_EQ(session.cached_tokens(), 2);  // the rest is prefilled again when next needed
  EXPECT_EQ(session.turns().size(), 3u);
}

// A truncating turn gives the blocks of the dropped positions back before it prefills the kept
// history, and a restore after it does not take them again.
TEST_F(SessionTest, DropOldestTurnsReleasesTheOldBlocksAtOnce) {
  const model::ModelConfig config = SmallConfig();
  auto pool = TestPool(config);
  Session session("a", 1, pool);
  session.SetSystemPrompt(std::vector<int32_t>(16, 1));  // one whole block
  for (int32_t turn = 0; turn < 4; ++turn) {
    const int64_t begin = session.length();
    Grow(session, config, 32, 10 + turn);
    session.AddTurn({begin, session.length()});
  }
  ASSERT_EQ(pool->used(), 9);  // 16 + 4 x 32 positions
  Session::Snapshot snapshot = session.TakeSnapshot();
  session.DropOldestTurns(3, snapshot);
  EXPECT_EQ(pool->used(), 1);  // the system prompt's block
  Grow(session, config, 0, 0);  // the kept turn prefilled again
  EXPECT_EQ(pool->used(), 3);
  session.Restore(std::move(snapshot));
  EXPECT_EQ(session.length(), 16 + 4 * 32);
  EXPECT_EQ(session.cached_tokens(), 16);
  EXPECT_EQ(pool->used(), 1);
}

TEST_F(SessionTest, ResetKeepsOnlyTheSystemPrompt) {
  const model::ModelConfig config = SmallConfig();
  Session session("a", 1, TestPool(config));
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
  Session parent("a", 1, TestPool(config));
  parent.SetSystemPrompt({3});
  Grow(parent, config, 6, 2);
  std::unique_ptr<Session> fork = parent.Fork("b", 1, /*with_cache=*/true);
  EXPECT_EQ(fork->tokens(), parent.tokens());
  ASSERT_EQ(fork->cached_tokens(), parent.cached_tokens());
  EXPECT_EQ(fork->sequence().cache.KeysAsFloats(0, 7), parent.sequence().cache.KeysAsFloats(0, 7));
  // Rewriting the fork's positions (copy on write) leaves the parent's untouched.
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

TEST_F(SessionRegistryTest, OwnershipAndListing) {
  Sessions s(SmallConfig(), 1ull << 30);
  SessionRegistry& store = s.registry;
  Session* mine = store.Create(1000).value();
  Session* theirs = store.Create(2000).value();
  EXPECT_TRUE(store.Find(mine->id(), 1000).ok());
  EXPECT_EQ(store.Find(mine->id(), 2000).status().code(), common::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Find(mine->id(), 0).status().code(), common::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Find("00000000000000000000000000000000", 1000).status().code(), common::StatusCode::kNotFound);
  EXPECT_EQ(store.Delete(theirs->id(), 1000).code(), common::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Fork(theirs->id(), 1000).status().code(), common::StatusCode::kPermissionDenied);
  ASSERT_EQ(store.List(1000).value().size(), 1u);
  EXPECT_EQ(store.List(1000).value()[0].id, mine->id());
  EXPECT_TRUE(store.List(3000).value().empty());
  EXPECT_TRUE(store.Delete(theirs->id(), 2000).ok());
  EXPECT_EQ(store.size(), 1u);
}

TEST_F(SessionRegistryTest, RootOnlyWhenAllowed) {
  Sessions s(SmallConfig(), 1ull << 30, {.max_sessions = 64, .allow_root = true});
  SessionRegistry& store = s.registry;
  Session* mine = store.Create(1000).value();
  EXPECT_TRUE(store.Find(mine->id(), 0).ok());
  EXPECT_TRUE(store.List(0).value().empty());  // listing stays own-only
}

TEST_F(SessionRegistryTest, MaxSessions) {
  Sessions s(SmallConfig(), 1ull << 30, {.max_sessions = 2});
  SessionRegistry& store = s.registry;
  Session* first = store.Create(1).value();
  ASSERT_TRUE(store.Create(1).ok());
  EXPECT_EQ(store.Create(1).status().code(), common::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.Fork(first->id(), 1).status().code(), common::StatusCode::kResourceExhausted);
}

TEST_F(SessionRegistryTest, AFullPoolDropsTheLeastRecentlyUsedIdleCachesFirst) {
  const model::ModelConfig config = SmallConfig();
  // Room for three 64-token caches (4 blocks each).
  Sessions s(config, PoolBytes(config, 12), {.max_sessions = 64});
  SessionRegistry& store = s.registry;
  ASSERT_EQ(store.pool().capacity(), 12);
  std::vector<Session*> sessions;
  for (int i = 0; i < 3; ++i) {
    sessions.push_back(store.Create(1).value());
    Grow(*sessions.back(), config, 64, 10 + i);  // different tokens: nothing shared
  }
  ASSERT_TRUE(store.Find(sessions[0]->id(), 1).ok());  // 0 is now more recent than 1 and 2
  Session* fourth = store.Create(1).value();
  fourth->MarkBusy(4);
  Grow(*fourth, config, 64, 20);
  fourth->ClearBusy();
  EXPECT_EQ(sessions[1]->cached_tokens(), 0);   // least recently used: dropped
  EXPECT_EQ(sessions[1]->length(), 64);         // its history stays
  EXPECT_EQ(sessions[0]->cached_tokens(), 64);
  EXPECT_EQ(sessions[2]->cached_tokens(), 64);
  EXPECT_EQ(s.budget.evictions(), 1u);
  EXPECT_LE(s.budget.used_bytes(), s.budget.budget_bytes());

  // A session with a running turn is never dropped for another one.
  sessions[2]->MarkBusy(4);
  ASSERT_TRUE(store.Find(sessions[0]->id(), 1).ok());  // 2 is now the least recently used
  sessions[1]->MarkBusy(4);     // a cache being written belongs to a busy session
  Grow(*sessions[1], config, 0, 0);  // re-caches its 64 tokens: 4 more blocks
  EXPECT_EQ(sessions[1]->cached_tokens(), 64);
  EXPECT_EQ(sessions[2]->cached_tokens(), 64);
  EXPECT_EQ(fourth->cached_tokens(), 0);  // the least recently used idle one
}

TEST_F(SessionRegistryTest, SessionsWithTheSameLeadingTokensShareBlocks) {
  const model::ModelConfig config = SmallConfig();
  Sessions s(config, PoolBytes(config, 64));
  SessionRegistry& store = s.registry;
  Session* first = store.Create(1).value();
  Grow(*first, config, 40, 7);
  // Another user's session with the same tokens finds none of them (prefix reuse is per owner).
  Session* stranger = store.Create(2).value();
  for (int i = 0; i < 40; ++i) stranger->sequence().tokens.push_back(7);
  EXPECT_EQ(stranger->sequence().cache.AttachPrefix(stranger->tokens()), 0);
  EXPECT_EQ(first->shared_blocks(), 0);
  ASSERT_TRUE(store.Delete(stranger->id(), 2).ok());
  Session* second = store.Create(1).value();  // the same user, same tokens: blocks are shared
  for (int i = 0; i < 40; ++i) second->sequence().tokens.push_back(7);
  EXPECT_EQ(second->sequence().cache.AttachPrefix(second->tokens()), 32);
  EXPECT_EQ(second->shared_blocks(), 2);
  EXPECT_EQ(first->shared_blocks(), 2);
  EXPECT_EQ(first->own_blocks(), 1);
  EXPECT_EQ(store.pool().used(), 3);
  // A fork shares every block; deleting it releases only what it alone held.
  Session* fork = store.Fork(first->id(), 1).value();
  EXPECT_EQ(store.pool().used(), 3);
  Grow(*fork, config, 1, 9);  // copies the shared last block
  EXPECT_EQ(store.pool().used(), 4);
  ASSERT_TRUE(store.Delete(fork->id(), 1).ok());
  EXPECT_EQ(store.pool().used(), 3);
  ASSERT_TRUE(store.Delete(first->id(), 1).ok());
  EXPECT_EQ(store.pool().used(), 2);  // second's attached prefix stays
  EXPECT_EQ(second->own_blocks(), 2);
}

TEST_F(SessionRegistryTest, AdmissionWaitsForMemoryHeldByRunningTurns) {
  const model::ModelConfig config = SmallConfig();
  Sessions s(config, PoolBytes(config, 10));
  SessionRegistry& store = s.registry;
  const int64_t bt = model::KvPool::kBlockTokens;
  Session* a = store.Create(1).value();
  Session* b = store.Create(1).value();
  Session* c = store.Create(1).value();
  bool wait = true;
  ASSERT_TRUE(s.budget.Admit(*a, 5 * bt, &wait).ok());  // 5 blocks + 1 for a copy on write
  EXPECT_FALSE(wait);
  EXPECT_TRUE(a->busy());
  ASSERT_TRUE(s.budget.Admit(*b, 4 * bt, &wait).ok());
  EXPECT_TRUE(wait) << "6 reserved by a running turn + 5 > 10: wait";
  EXPECT_FALSE(b->busy());
  ASSERT_TRUE(s.budget.Admit(*c, 3 * bt, &wait).ok());
  EXPECT_FALSE(wait) << "6 + 4 fits";
  EXPECT_EQ(s.budget.Admit(*b, 10 * bt, &wait).code(), common::StatusCode::kResourceExhausted)
      << "more than the whole pool never fits: refused at once";
  a->ClearBusy();
  ASSERT_TRUE(s.budget.Admit(*b, 4 * bt, &wait).ok());
  EXPECT_FALSE(wait) << "a's turn ended: its memory is free for b";
}

// ------------------------------------------------------------------------------ durable sessions

class DurableSessionsTest : public SessionTest {
 protected:
  std::unique_ptr<state::DurableStore> OpenDurable(const std::string& fingerprint = kFingerprint) {
    state::DurableStoreOptions options;
    options.dir = dir_.path();
    options.model_fingerprint = fingerprint;
    options.model_name = fingerprint == kFingerprint ? "small" : "other";
    auto store = state::DurableStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  static constexpr const char* kFingerprint = "0123456789abcdef0123456789abcdef";
  testing::TempDir dir_;
};

TEST_F(DurableSessionsTest, SessionsAreStoredAndLoadedLazilyWithTheirHistory) {
  const model::ModelConfig config = SmallConfig();
  std::string id;
  std::vector<int32_t> tokens;
  {
    auto durable = OpenDurable();
    Sessions s(config, 1ull << 30, {}, durable.get());
    SessionRegistry& store = s.registry;
    Session* session = store.Create(1000, std::string("be brief"), {1, 2, 3}).value();
    id = session->id();
    Session::Snapshot snapshot = session->TakeSnapshot();
    Grow(*session, config, 5, 7);
    session->AddTurn({3, 8});
    ASSERT_TRUE(store.Commit(*session).ok());
    tokens = session->tokens();
    Grow(*session, config, 4, 9);  // not committed: a turn that never completed
  }
  auto durable = OpenDurable();
  Sessions s(config, 1ull << 30, {}, durable.get());
    SessionRegistry& store = s.registry;
  EXPECT_EQ(store.size(), 0u);  // nothing loaded at start
  auto listed = store.List(1000).value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, id);
  EXPECT_EQ(listed[0].turns, 1);
  EXPECT_EQ(listed[0].system_prompt_text, "be brief");
  EXPECT_FALSE(listed[0].other_model);
  EXPECT_EQ(store.Find(id, 2000).status().code(), common::StatusCode::kPermissionDenied);
  Session* loaded = store.Find(id, 1000).value();
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(loaded->tokens(), tokens);
  ASSERT_EQ(loaded->turns().size(), 1u);
  EXPECT_EQ(loaded->turns()[0], (TokenSpan{3, 8}));
  EXPECT_EQ(loaded->system_end(), 3);
  EXPECT_TRUE(loaded->has_system_prompt());
  EXPECT_EQ(loaded->cached_tokens(), 0);
  ASSERT_TRUE(store.Reset(*loaded).ok());
  EXPECT_EQ(durable->Load(id).value()->history.tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_TRUE(store.Delete(id, 1000).ok());
  EXPECT_FALSE(durable->Load(id).value().has_value());
}

// A session of a model with a Jinja chat template keeps its conversation as messages: stored on
// commit, read back with the session (reasoning included), counted as turns, emptied by Reset, and
// copied by Fork. The session here is one an earlier nielsd stored holding the template's start
// without a system prompt (it prefilled that start at CreateSession; a new session is empty): it
// loads as a chat session already started, and Reset keeps the start.
TEST_F(DurableSessionsTest, ConversationMessagesAreStoredAndRestored) {
  const model::ModelConfig config = SmallConfig();
  std::string id;
  std::vector<text::ChatMessage> messages;
  {
    auto durable = OpenDurable();
    state::StoredSession old;
    old.summary.id = "00112233445566778899aabbccddeeff";
    old.summary.owner = 1000;
    old.summary.model_fingerprint = kFingerprint;
    old.summary.model_name = "small";
    old.summary.length = 2;
    old.summary.created_unix_s = old.summary.last_used_unix_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    old.history.system_end = 2;
    old.history.tokens = {1, 2};  // a template's start
    std::vector<std::string> evicted;
    ASSERT_TRUE(durable->Create(old, &evicted).ok());
    Sessions s(config, 1ull << 30, {}, durable.get());
    Session* session = s.registry.Find(old.summary.id, 1000).value();
    EXPECT_EQ(session->tokens(), (std::vector<int32_t>{1, 2}));
    id = session->id();
    EXPECT_FALSE(session->has_system_prompt());
    EXPECT_EQ(session->system_end(), 2);
    Grow(*session, config, 6, 7);
    session->AddExchange({text::Role::kUser, "Grüße", ""}, {text::Role::kAssistant, "Hallo", "user greets\n"});
    session->AddExchange({text::Role::kUser, "", ""}, {text::Role::kAssistant, "?", ""});
    ASSERT_TRUE(s.registry.Commit(*session).ok());
    messages = session->messages();
    EXPECT_EQ(session->completed_turns(), 2);
    std::unique_ptr<Session> fork = session->Fork("f", 1000, /*with_cache=*/false);
    EXPECT_EQ(fork->messages(), messages);
  }
  auto durable = OpenDurable();
  Sessions s(config, 1ull << 30, {}, durable.get());
  auto listed = s.registry.List(1000).value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].turns, 2);
  Session* loaded = s.registry.Find(id, 1000).value();
  EXPECT_EQ(loaded->messages(), messages);
  EXPECT_EQ(loaded->system_end(), 2);
  ASSERT_TRUE(s.registry.Reset(*loaded).ok());
  EXPECT_TRUE(loaded->messages().empty());
  EXPECT_EQ(loaded->tokens(), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(durable->Load(id).value()->history.messages.empty());
}

TEST_F(DurableSessionsTest, AnotherModelsSessionIsListedRefusedAndDeletable) {
  const model::ModelConfig config = SmallConfig();
  std::string id;
  {
    auto other = OpenDurable("ffffffffffffffffffffffffffffffff");
    Sessions s(config, 1ull << 30, {}, other.get());
    SessionRegistry& store = s.registry;
    id = store.Create(1000).value()->id();
  }
  auto durable = OpenDurable();
  Sessions s(config, 1ull << 30, {}, durable.get());
    SessionRegistry& store = s.registry;
  auto listed = store.List(1000).value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].other_model);
  EXPECT_EQ(listed[0].model_name, "other");
  const auto found = store.Find(id, 1000);
  EXPECT_EQ(found.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(found.status().message().find("another model ('other')"), std::string::npos);
  EXPECT_EQ(store.Delete(id, 2000).code(), common::StatusCode::kPermissionDenied);
  EXPECT_TRUE(store.Delete(id, 1000).ok());
  EXPECT_TRUE(store.List(1000).value().empty());
}

TEST_F(DurableSessionsTest, LoadedLimitUnloadsTheLeastRecentlyUsedIdleSession) {
  const model::ModelConfig config = SmallConfig();
  auto durable = OpenDurable();
  Sessions s(config, 1ull << 30, {.max_sessions_per_uid = 2}, durable.get());
  SessionRegistry& store = s.registry;
  Session* a = store.Create(1).value();
  const std::string a_id = a->id();
  Session* b = store.Create(1).value();
  Session* c = store.Create(1).value();  // a (least recently used) leaves memory
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.List(1).value().size(), 3u);
  b->MarkBusy(0);
  c->MarkBusy(0);
  EXPECT_EQ(store.Find(a_id, 1).status().code(), common::StatusCode::kResourceExhausted);  // both busy
  c->ClearBusy();
  EXPECT_TRUE(store.Find(a_id, 1).ok());  // c is unloaded for it
  EXPECT_EQ(store.size(), 2u);
}

TEST_F(DurableSessionsTest, EvictedCacheIsSpilledAndReadBackExactly) {
  const model::ModelConfig config = SmallConfig();
  auto durable = OpenDurable();
  // 10 blocks: a's 100 tokens (7 blocks) and b's 100 tokens do not fit together.
  Sessions s(config, PoolBytes(config, 10), {}, durable.get());
  SessionRegistry& store = s.registry;
  Session* a = store.Create(1).value();
  Grow(*a, config, 100, 5);
  const std::vector<float> keys = a->sequence().cache.KeysAsFloats(1, 100);
  const std::vector<float> values = a->sequence().cache.ValuesAsFloats(1, 100);
  Session* b = store.Create(1).value();
  bool wait = true;
  ASSERT_TRUE(s.budget.Admit(*b, 100, &wait).ok());
  ASSERT_FALSE(wait);
  Grow(*b, config, 100, 7);  // the pool reclaims a's idle cache: spilled
  b->ClearBusy();
  EXPECT_EQ(a->cached_tokens(), 0);
  EXPECT_EQ(s.spiller.counters().spill_writes, 1u);
  EXPECT_TRUE(std::filesystem::exists(durable->spill().PathFor(a->id())));
  ASSERT_TRUE(store.Reset(*b).ok());  // frees b's blocks for a's read-back
  ASSERT_TRUE(s.budget.Admit(*a, 100, &wait).ok());
  s.spiller.RestoreSpilledCache(*a);
  a->ClearBusy();
  ASSERT_EQ(a->cached_tokens(), 100);
  EXPECT_EQ(a->sequence().cache.KeysAsFloats(1, 100), keys);
  EXPECT_EQ(a->sequence().cache.ValuesAsFloats(1, 100), values);
  EXPECT_EQ(s.spiller.counters().spill_reads, 1u);
  EXPECT_FALSE(std::filesystem::exists(durable->spill().PathFor(a->id())));  // read once, then gone
  // A history that changed since the spill: the file is refused and the cache stays empty.
  ASSERT_TRUE(s.budget.Admit(*b, 100, &wait).ok());
  Grow(*b, config, 100, 7);  // evicts a again
  b->ClearBusy();
  ASSERT_EQ(a->cached_tokens(), 0);
  a->sequence().tokens[10] = 6;
  ASSERT_TRUE(store.Reset(*b).ok());
  s.spiller.RestoreSpilledCache(*a);
  EXPECT_EQ(a->cached_tokens(), 0);
  EXPECT_EQ(s.spiller.counters().spill_read_failures, 1u);
}

}  // namespace
}  // namespace niels::daemon::sessions
