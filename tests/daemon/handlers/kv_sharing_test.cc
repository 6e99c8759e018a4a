// The paged KV pool through the engine (docs/ARCHITECTURE.md, "Sessions and the KV cache"): prefix
// sharing across sessions (identical prompts, prompts diverging inside a block and at a block
// boundary), forks that copy on write, reset, delete, eviction under a small budget, and the
// context limit's low-water mark. Every generated token and its logprob is compared with == against
// the uncached full forward over exactly the session's tokens on a second engine, and the pool's
// figures are read back through Stats and GetSession.
#include <algorithm>

#include <gtest/gtest.h>

#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace kv_sharing_test {  // this file's own names: the suite compiles as one unity unit

using Ids = std::vector<int32_t>;

constexpr int64_t kContext = 256;
constexpr int64_t kBlock = 16;  // model::KvPool::kBlockTokens

Ids ToIds(const google::protobuf::RepeatedField<int32_t>& field) { return Ids(field.begin(), field.end()); }

// What a greedy Generate produced: the tokens, their logprobs and the request's stats.
struct Generated {
  Ids ids;
  std::vector<float> logprobs;
  v1::GenerationStats stats;
  int64_t session_length = 0;
};

class KvSharingTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(kContext); }
  void Start(int64_t context, EngineOptions options = {}) {
    context_ = context;
    engine_ = StartEngine(context, std::move(options));
    reference_ = StartEngine(context);
    model_ = LoadTinyModel(context);
    special_ = model_->special;
  }

  std::string Create(const std::string* system = nullptr) {
    const v1::Response response = Call(*engine_, CreateRequest(system));
    EXPECT_TRUE(response.has_create_session()) << response.DebugString();
    return response.create_session().session_id();
  }
  // Plain-text ids (never special), `n` of them; `salt` rotates which corpus lines they come from.
  Ids Prompt(size_t n, size_t salt = 0) const {
    Ids ids;
    for (size_t line = salt; ids.size() < n; ++line) {
      for (int32_t id : niels::testing::EncodeText(*model_->tokenizer, niels::testing::TinyCorpus().at(line % 3))) {
        if (ids.size() < n) ids.push_back(id);
      }
    }
    return ids;
  }
  // `ids` with the token at `at` replaced by a different plain token.
  static Ids Diverge(Ids ids, size_t at) {
    ids.at(at) = ids[at] == ids[0] ? ids[1] : ids[0];
    return ids;
  }
  Ids SystemIds(const std::string& text) const {
    Ids ids = {special_.sys};
    for (int32_t id : niels::testing::EncodeText(*model_->tokenizer, text)) ids.push_back(id);
    ids.push_back(special_.eot);
    return ids;
  }

  // A greedy Generate of exactly n tokens (eot banned) with logprobs.
  v1::Request GenerateWithLogprobs(const std::string& session, const Ids& input, int n, bool use_kv_cache = true) const {
    v1::Request request = GenerateRequest(session, input, n);
    v1::GenerateRequest& generate = *request.mutable_generate();
    generate.set_want_logprobs(true);
    generate.set_use_kv_cache(use_kv_cache);
    generate.mutable_sampling()->add_banned_ids(special_.eot);
    return request;
  }
  Generated Generate(Service& service, const std::string& session, const Ids& input, int n, bool use_kv_cache = true) {
    const v1::Response response = Call(service, GenerateWithLogprobs(session, input, n, use_kv_cache));
    EXPECT_TRUE(response.has_generate()) << response.DebugString();
    Generated run;
    run.ids = ToIds(response.generate().new_ids());
    for (const v1::StepInfo& step : response.generate().steps()) run.logprobs.push_back(step.logprob());
    run.stats = response.generate().stats();
    run.session_length = response.generate().session_length();
    return run;
  }
  Generated Generate(const std::string& session, const Ids& input, int n) {
    return Generate(*engine_, session, input, n);
  }
  // The full forward: an uncached Generate over exactly `tokens` in a fresh session of the second
  // engine (every step a forward over all the tokens, no cache, nothing shared).
  Generated Reference(const Ids& tokens, int n) {
    const std::string fresh = Call(*reference_, CreateRequest()).create_session().session_id();
    return Generate(*reference_, fresh, tokens, n, /*use_kv_cache=*/false);
  }
  // Generate on the engine and the same over the session's whole history on the reference must agree
  // token for token and logprob for logprob (==).
  Generated ExpectEqualsFullForward(const std::string& session, const Ids& input, int n, const std::string& what) {
    Ids history = Tokens(session);
    history.insert(history.end(), input.begin(), input.end());
    const Generated run = Generate(session, input, n);
    const Generated reference = Reference(history, n);
    EXPECT_EQ(run.ids, reference.ids) << what;
    EXPECT_EQ(run.logprobs, reference.logprobs) << what;
    EXPECT_EQ(run.ids.size(), static_cast<size_t>(n)) << what;
    EXPECT_EQ(run.logprobs.size(), static_cast<size_t>(n)) << what;
    return run;
  }

  Ids Tokens(const std::string& session) {
    return ToIds(Call(*engine_, GetRequest(session)).get_session().token_ids());
  }
  v1::SessionInfo Info(const std::string& session) {
    const v1::Response response = Call(*engine_, GetRequest(session));
    EXPECT_TRUE(response.has_get_session()) << response.DebugString();
    return response.get_session().session();
  }
  v1::StatsResponse Stats() {
    v1::Request request;
    request.mutable_stats();
    return Call(*engine_, request).stats();
  }
  v1::Response Fork(const std::string& session) {
    v1::Request request;
    request.mutable_fork_session()->set_session_id(session);
    return Call(*engine_, request);
  }

  void ChatPastTheContextLimit(EngineOptions options);

  int64_t context_ = 0;
  std::unique_ptr<Service> engine_;
  std::unique_ptr<Service> reference_;
  std::unique_ptr<loaders::Model> model_;
  text::SpecialTokens special_;
};

TEST_F(KvSharingTest, SessionsWithTheSameSystemPromptStoreItOnce) {
  const std::string system = "you are a small test bot that answers questions about sockets and sessions";
  const Ids system_ids = SystemIds(system);
  const int64_t full = static_cast<int64_t>(system_ids.size()) / kBlock;
  const int64_t tail = static_cast<int64_t>(system_ids.size()) % kBlock != 0 ? 1 : 0;
  ASSERT_GE(full, 1) << "the system prompt must fill a block";

  std::vector<std::string> sessions;
  for (int i = 0; i < 3; ++i) sessions.push_back(Create(&system));
  const v1::StatsResponse stats = Stats();
  // The full blocks once, each session's partial last block on its own.
  EXPECT_EQ(stats.kv_blocks_used(), static_cast<uint32_t>(full + 3 * tail));
  EXPECT_EQ(stats.kv_blocks_shared(), static_cast<uint32_t>(full));
  EXPECT_EQ(stats.kv_bytes(), stats.kv_blocks_used() * stats.kv_block_bytes());
  EXPECT_EQ(stats.kv_block_tokens(), static_cast<uint32_t>(kBlock));
  EXPECT_GE(stats.kv_blocks_total(), stats.kv_blocks_used());
  EXPECT_EQ(stats.prefix_hit_tokens(), static_cast<uint64_t>(2 * full * kBlock));
  EXPECT_EQ(stats.tokens_prefilled_total(), static_cast<uint64_t>(system_ids.size() + 2 * tail * (system_ids.size() % kBlock)));
  EXPECT_DOUBLE_EQ(stats.prefix_hit_rate(), static_cast<double>(stats.prefix_hit_tokens()) /
                                                static_cast<double>(stats.prefix_hit_tokens() + stats.tokens_prefilled_total()));
  for (const std::string& id : sessions) {
    const v1::SessionInfo info = Info(id);
    EXPECT_EQ(info.kv_shared_blocks(), full);
    EXPECT_EQ(info.kv_own_blocks(), tail);
    EXPECT_EQ(info.kv_bytes(), (full + tail) * static_cast<int64_t>(stats.kv_block_bytes()));
  }
  // Each continues on its own from the shared prompt, equal to the full forward over its tokens.
  for (size_t i = 0; i < sessions.size(); ++i) {
    const Generated run = ExpectEqualsFullForward(sessions[i], Prompt(10 + i, i), 6, "session " + std::to_string(i));
    EXPECT_EQ(run.stats.reused_tokens(), static_cast<int64_t>(system_ids.size()));
  }
  EXPECT_EQ(Info(sessions[0]).kv_shared_blocks(), full);  // writes after the prompt never touched it
}

TEST_F(KvSharingTest, DivergingPromptsShareTheirCommonWholeBlocksOnly) {
  const Ids base = Prompt(3 * kBlock + 5);
  const std::string first = Create();
  ExpectEqualsFullForward(first, base, 4, "first");
  // Diverging at a block boundary (position 32), inside a block (37 and 20), and at position 0.
  const struct {
    size_t at;
    int64_t shared_blocks;
  } cases[] = {{2 * kBlock, 2}, {2 * kBlock + 5, 2}, {kBlock + 4, 1}, {0, 0}};
  for (const auto& c : cases) {
    const std::string what = "diverging at " + std::to_string(c.at);
    const std::string id = Create();
    const Generated run = ExpectEqualsFullForward(id, Diverge(base, c.at), 4, what);
    EXPECT_EQ(run.stats.reused_tokens(), c.shared_blocks * kBlock) << what;
    EXPECT_EQ(run.stats.prefilled_tokens(), static_cast<int64_t>(base.size()) - c.shared_blocks * kBlock) << what;
    EXPECT_EQ(Info(id).kv_shared_blocks(), c.shared_blocks) << what;
  }
  // The first session's tokens and results are untouched by the others.
  EXPECT_EQ(Info(first).length(), static_cast<int64_t>(base.size()) + 4);
  ExpectEqualsFullForward(first, Prompt(5, 1), 4, "first again");
}

// A prompt of exactly two blocks, sent again on a new session: both blocks are found, but the last
// position is recomputed for its logits, so it counts as prefilled and not as a prefix hit: hits +
// prefilled add up to the prompt.
TEST_F(KvSharingTest, APromptOfWholeBlocksRecomputesItsLastPositionAndCountsItOnce) {
  const Ids prompt = Prompt(2 * kBlock);
  ExpectEqualsFullForward(Create(), prompt, 3, "first");
  const v1::StatsResponse before = Stats();
  const Generated again = ExpectEqualsFullForward(Create(), prompt, 3, "again");
  const v1::StatsResponse after = Stats();
  EXPECT_EQ(again.stats.reused_tokens(), 2 * kBlock - 1);
  EXPECT_EQ(again.stats.prefilled_tokens(), 1);
  EXPECT_EQ(after.prefix_hit_tokens() - before.prefix_hit_tokens(), static_cast<uint64_t>(2 * kBlock - 1));
  EXPECT_EQ(after.tokens_prefilled_total() - before.tokens_prefilled_total(), 1u);
}

// Prefix reuse is per user: another uid's identical system prompt and prompt are prefilled in full
// (no block found, none shared, no prefix hit), so neither the blocks nor the time to first token
// tell one user what another sent; the first user's own second session still reuses them.
TEST_F(KvSharingTest, UsersNeverShareBlocks) {
  constexpr uint32_t kOther = kUid + 1;
  const auto create_as_other = [&](const std::string* system) {
    const v1::Response created = Call(*engine_, CreateRequest(system), kOther);
    EXPECT_TRUE(created.has_create_session()) << created.DebugString();
    return created.create_session().session_id();
  };
  const auto shared_blocks_of_other = [&](const std::string& session) {
    const v1::Response info = Call(*engine_, GetRequest(session), kOther);
    EXPECT_TRUE(info.has_get_session()) << info.DebugString();
    return info.get_session().session().kv_shared_blocks();
  };

  // The same system prompt: stored once per user.
  const std::string system = "you are a small test bot that answers questions about sockets and sessions";
  const Ids system_ids = SystemIds(system);
  const int64_t full = static_cast<int64_t>(system_ids.size()) / kBlock;
  ASSERT_GE(full, 1) << "the system prompt must fill a block";
  const std::string mine = Create(&system);
  v1::StatsResponse before = Stats();
  const std::string theirs = create_as_other(&system);
  v1::StatsResponse after = Stats();
  EXPECT_EQ(after.prefix_hit_tokens(), before.prefix_hit_tokens());
  EXPECT_EQ(after.tokens_prefilled_total() - before.tokens_prefilled_total(), system_ids.size());
  EXPECT_EQ(after.kv_blocks_shared(), 0u);
  EXPECT_EQ(Info(mine).kv_shared_blocks(), 0);
  EXPECT_EQ(shared_blocks_of_other(theirs), 0);
  const std::string mine_again = Create(&system);
  EXPECT_EQ(Info(mine_again).kv_shared_blocks(), full);
  EXPECT_EQ(shared_blocks_of_other(theirs), 0);

  // The same prompt on empty sessions: the other user prefills all of it and gets the same tokens and
  // logprobs; the first user's next session reuses its whole blocks.
  const Ids prompt = Prompt(3 * kBlock + 5);
  const Generated first = ExpectEqualsFullForward(Create(), prompt, 4, "first user");
  before = Stats();
  const v1::Response generated = Call(*engine_, GenerateWithLogprobs(create_as_other(nullptr), prompt, 4), kOther);
  ASSERT_TRUE(generated.has_generate()) << generated.DebugString();
  after = Stats();
  EXPECT_EQ(after.prefix_hit_tokens(), before.prefix_hit_tokens());
  EXPECT_EQ(generated.generate().stats().reused_tokens(), 0);
  EXPECT_EQ(generated.generate().stats().prefilled_tokens(), static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(ToIds(generated.generate().new_ids()), first.ids);
  std::vector<float> logprobs;
  for (const v1::StepInfo& step : generated.generate().steps()) logprobs.push_back(step.logprob());
  EXPECT_EQ(logprobs, first.logprobs);
  const Generated reused = ExpectEqualsFullForward(Create(), prompt, 4, "first user again");
  EXPECT_EQ(reused.stats.reused_tokens(), static_cast<int64_t>(prompt.size()) / kBlock * kBlock);
}

TEST_F(KvSharingTest, ForkCostsNoBlocksAndBothBranchesContinueIndependently) {
  const std::string parent = Create();
  ExpectEqualsFullForward(parent, Prompt(2 * kBlock + 7), 6, "parent");
  const v1::StatsResponse before = Stats();
  const v1::Response forked = Fork(parent);
  ASSERT_TRUE(forked.has_fork_session()) << forked.DebugString();
  const std::string child = forked.fork_session().session_id();
  const v1::StatsResponse after = Stats();
  EXPECT_EQ(after.kv_blocks_used(), before.kv_blocks_used());  // no copy at all
  EXPECT_EQ(after.kv_bytes(), before.kv_bytes());
  const v1::SessionInfo child_info = Info(child);
  EXPECT_EQ(child_info.kv_own_blocks(), 0);
  EXPECT_EQ(child_info.kv_shared_blocks(), Info(parent).kv_shared_blocks());
  EXPECT_EQ(child_info.kv_shared_blocks() * static_cast<int64_t>(after.kv_block_bytes()), child_info.kv_bytes());

  // Different continuations: copy on write of the one partly filled block, each equal to the full
  // forward over its own history.
  const Ids parent_before = Tokens(parent);
  const Generated on_child = ExpectEqualsFullForward(child, Prompt(9, 1), 5, "child");
  EXPECT_EQ(Tokens(parent), parent_before);
  EXPECT_LE(Stats().kv_blocks_used(), before.kv_blocks_used() + 2);  // the copied block + at most one new
  const Generated on_parent = ExpectEqualsFullForward(parent, Prompt(11, 2), 5, "parent after fork");
  ExpectEqualsFullForward(child, Prompt(4, 2), 3, "child again");
  EXPECT_NE(Tokens(parent), Tokens(child));
  EXPECT_EQ(on_child.stats.reused_tokens(), static_cast<int64_t>(parent_before.size()) - 1);
  EXPECT_EQ(on_parent.stats.reused_tokens(), static_cast<int64_t>(parent_before.size()) - 1);
}

TEST_F(KvSharingTest, ResetKeepsTheSystemPromptBlocks) {
  const std::string system = "be brief and answer in one short sentence about the weather today";
  const Ids system_ids = SystemIds(system);
  const std::string id = Create(&system);
  ASSERT_TRUE(Call(*engine_, ChatRequest(id, "hello there, how are you doing?", 12)).has_chat());
  ASSERT_TRUE(Call(*engine_, ChatRequest(id, "tell me more", 12)).has_chat());
  v1::Request reset;
  reset.mutable_reset_session()->set_session_id(id);
  ASSERT_TRUE(Call(*engine_, reset).has_reset_session());
  const v1::SessionInfo info = Info(id);
  EXPECT_EQ(Tokens(id), system_ids);
  EXPECT_EQ(info.cached_tokens(), static_cast<int64_t>(system_ids.size()));
  EXPECT_EQ(info.kv_own_blocks() + info.kv_shared_blocks(),
            (static_cast<int64_t>(system_ids.size()) + kBlock - 1) / kBlock);
  // The next request prefills only its own input.
  const Ids input = Prompt(7);
  const Generated run = ExpectEqualsFullForward(id, input, 5, "after reset");
  EXPECT_EQ(run.stats.reused_tokens(), static_cast<int64_t>(system_ids.size()));
  EXPECT_EQ(run.stats.prefilled_tokens(), static_cast<int64_t>(input.size()));
}

// A stateless client (the HTTP front) re-sends a conversation on a fresh session that holds only
// its system prompt: the blocks the previous request left in the pool reach past that prompt, so the
// session takes them instead of prefilling the conversation again. Another user's session with the
// same system prompt and input gets none of them.
TEST_F(KvSharingTest, ASessionHoldingItsSystemPromptTakesTheLongerPrefixItsUserLeft) {
  const std::string system = "be brief and answer in one short sentence about the weather today";
  const Ids system_ids = SystemIds(system);
  const Ids prompt = Prompt(3 * kBlock + 5);
  const int64_t whole = static_cast<int64_t>(system_ids.size() + prompt.size());
  ASSERT_NE(whole % kBlock, 0) << "the history must end inside a block for the count below";

  const std::string first = Create(&system);
  ExpectEqualsFullForward(first, prompt, 4, "first request");
  v1::Request remove;
  remove.mutable_delete_session()->set_session_id(first);
  ASSERT_TRUE(Call(*engine_, remove).has_delete_session());

  const std::string again = Create(&system);
  ASSERT_EQ(Info(again).cached_tokens(), static_cast<int64_t>(system_ids.size()));
  const v1::StatsResponse before = Stats();
  const Generated resent = ExpectEqualsFullForward(again, prompt, 4, "the same conversation re-sent");
  EXPECT_EQ(resent.stats.reused_tokens(), whole / kBlock * kBlock);
  EXPECT_EQ(resent.stats.prefilled_tokens(), whole - whole / kBlock * kBlock);
  EXPECT_EQ(Stats().prefix_hit_tokens() - before.prefix_hit_tokens(),
            static_cast<uint64_t>(whole / kBlock * kBlock));

  constexpr uint32_t kOther = kUid + 1;
  const v1::Response created = Call(*engine_, CreateRequest(&system), kOther);
  ASSERT_TRUE(created.has_create_session()) << created.DebugString();
  const v1::Response generated =
      Call(*engine_, GenerateWithLogprobs(created.create_session().session_id(), prompt, 4), kOther);
  ASSERT_TRUE(generated.has_generate()) << generated.DebugString();
  EXPECT_EQ(generated.generate().stats().reused_tokens(), static_cast<int64_t>(system_ids.size()));
  EXPECT_EQ(ToIds(generated.generate().new_ids()), resent.ids);
}

TEST_F(KvSharingTest, DeleteReleasesOnlyTheBlocksNoOtherSessionHolds) {
  const Ids shared = Prompt(3 * kBlock);
  const std::string a = Create();
  const std::string b = Create();
  ExpectEqualsFullForward(a, shared, 3, "a");  // 50 positions cached: 3 full blocks and 1 of its own
  Ids b_input = shared;
  const Ids b_tail = Prompt(2 * kBlock, 1);
  b_input.insert(b_input.end(), b_tail.begin(), b_tail.end());
  ExpectEqualsFullForward(b, b_input, 1, "b");
  const v1::SessionInfo a_info = Info(a);
  EXPECT_EQ(a_info.kv_shared_blocks(), 3);
  EXPECT_EQ(a_info.kv_own_blocks(), 1);
  const v1::StatsResponse before = Stats();

  v1::Request remove;
  remove.mutable_delete_session()->set_session_id(a);
  ASSERT_TRUE(Call(*engine_, remove).has_delete_session());
  const v1::StatsResponse after = Stats();
  // a's own block went; the three shared ones stay with b (now b's alone).
  EXPECT_EQ(after.kv_blocks_used(), before.kv_blocks_used() - 1);
  EXPECT_EQ(after.kv_blocks_shared(), before.kv_blocks_shared() - 3);
  const v1::SessionInfo b_info = Info(b);
  EXPECT_EQ(b_info.kv_shared_blocks(), 0);
  EXPECT_EQ(b_info.kv_own_blocks() * static_cast<int64_t>(after.kv_block_bytes()), b_info.kv_bytes());
  EXPECT_EQ(b_info.cached_tokens(), static_cast<int64_t>(b_input.size()));
  ExpectEqualsFullForward(b, Prompt(6, 2), 5, "b after a was deleted");
  // A new session with a's prompt still finds the blocks (b holds them).
  const std::string c = Create();
  const Generated run = ExpectEqualsFullForward(c, shared, 2, "c");
  EXPECT_EQ(run.stats.reused_tokens(), 2 * kBlock + kBlock - 1);  // all but the position sampled from
}

TEST_F(KvSharingTest, SmallBudgetWithManySessionsEvictsIdleCachesAndStaysExact) {
  // 14 blocks (224 positions): far less than 8 sessions of ~70 positions each.
  const uint64_t block_bytes = 2ull * model_->config.layers * model_->config.width * sizeof(float) * kBlock;
  EngineOptions small;
  small.kv_budget_bytes = 14 * ((block_bytes + 4095) / 4096 * 4096);
  small.max_batch = 4;
  Start(kContext, small);
  const std::string system = "you are a small test bot that answers questions about sockets and sessions";
  const Ids system_ids = SystemIds(system);
  std::vector<std::string> sessions;
  for (int i = 0; i < 8; ++i) sessions.push_back(Create(&system));
  for (int round = 0; round < 3; ++round) {
    // Four sessions at a time run concurrently (one batch) while the others' caches are evicted
    // under them; the shared system-prompt blocks the running ones read must never be reused.
    for (size_t first = 0; first < sessions.size(); first += 4) {
      std::vector<std::shared_ptr<RecordingSink>> sinks;
      std::vector<Ids> histories;
      for (size_t i = first; i < first + 4; ++i) {
        Ids input = Prompt(12 + i + round, i + round);
        Ids history = Tokens(sessions[i]);
        history.insert(history.end(), input.begin(), input.end());
        sinks.push_back(SubmitAsync(*engine_, GenerateWithLogprobs(sessions[i], input, 6)));
        histories.push_back(std::move(history));
      }
      for (size_t k = 0; k < sinks.size(); ++k) {
        const v1::Response response = sinks[k]->Wait();
        ASSERT_TRUE(response.has_generate()) << response.DebugString();
        const Generated reference = Reference(histories[k], 6);
        const std::string what = "round " + std::to_string(round) + " session " + std::to_string(first + k);
        EXPECT_EQ(ToIds(response.generate().new_ids()), reference.ids) << what;
        std::vector<float> logprobs;
        for (const v1::StepInfo& step : response.generate().steps()) logprobs.push_back(step.logprob());
        EXPECT_EQ(logprobs, reference.logprobs) << what;
      }
    }
  }
  const v1::StatsResponse stats = Stats();
  EXPECT_EQ(stats.kv_blocks_total(), 14u);
  EXPECT_LE(stats.kv_blocks_used() + stats.kv_blocks_cached(), stats.kv_blocks_total());
  EXPECT_GT(stats.kv_caches_dropped(), 0u);  // idle sessions were evicted and recomputed
  EXPECT_GT(stats.prefix_hit_tokens(), 0u);  // re-prefills found the system prompt's blocks
  EXPECT_EQ(stats.sessions(), 8u);
}

// 24 chat turns of 8 reply tokens in a context of 128 with --context-keep 0.5: whole turns are
// dropped down to the low-water mark, and every reply equals the full forward over what was kept.
void KvSharingTest::ChatPastTheContextLimit(EngineOptions options) {
  constexpr int64_t kSmallContext = 128;
  options.context_keep = 0.5;  // low-water mark 64 tokens
  Start(kSmallContext, options);
  const std::string system = "be brief";
  const Ids system_ids = SystemIds(system);
  const std::string id = Create(&system);
  const std::vector<std::string> texts = {"hello there", "what is the weather like today?", "tell me more",
                                          "why is that so", "thanks, goodbye"};
  std::vector<Ids> turns;  // completed turns, oldest first
  int truncations = 0;
  int turns_since_truncation = 0;
  for (int i = 0; i < 24; ++i) {
    const std::string& text = texts[static_cast<size_t>(i) % texts.size()];
    Ids user = {special_.usr};
    for (int32_t t : niels::testing::EncodeText(*model_->tokenizer, text)) user.push_back(t);
    user.push_back(special_.eot);
    user.push_back(special_.asst);
    v1::Request request = ChatRequest(id, text, 8);
    request.mutable_chat()->mutable_sampling()->add_banned_ids(special_.eot);  // replies of exactly 8
    const v1::Response response = Call(*engine_, request);
    ASSERT_TRUE(response.has_chat()) << response.DebugString();
    const v1::ChatResponse& chat = response.chat();
    const size_t dropped = static_cast<size_t>(chat.truncated_turns());
    ASSERT_LE(dropped, turns.size());
    // What was kept: the system prompt and the newest turns; with this turn at most 64 tokens, and
    // one turn fewer dropped would have been above the mark (whole turns, no more than needed).
    auto kept_length = [&](size_t drop) {
      int64_t length = static_cast<int64_t>(system_ids.size() + user.size());
      for (size_t t = drop; t < turns.size(); ++t) length += static_cast<int64_t>(turns[t].size());
      return length;
    };
    if (dropped > 0) {
      ++truncations;
      EXPECT_GT(kept_length(0) + 8, kSmallContext) << "turn " << i << ": dropped although it fitted";
      EXPECT_LE(kept_length(dropped), kSmallContext / 2) << "turn " << i;
      EXPECT_GT(kept_length(dropped - 1), kSmallContext / 2) << "turn " << i;
      // The kept system prompt at least; more when whole blocks of the kept history are still in
      // the pool from an earlier turn of the same tokens (the texts repeat).
      EXPECT_GE(chat.stats().reused_tokens(), static_cast<int64_t>(system_ids.size()));
      EXPECT_LT(chat.stats().reused_tokens(), kept_length(dropped));
      if (truncations > 1) {
        EXPECT_GE(turns_since_truncation, 2) << "the re-prefill must not come every turn";
      }
      turns_since_truncation = 0;
    } else {
      EXPECT_LE(kept_length(0) + 8, kSmallContext) << "turn " << i;
      ++turns_since_truncation;
    }
    turns.erase(turns.begin(), turns.begin() + static_cast<std::ptrdiff_t>(dropped));
    // The reply equals the full forward over the kept tokens.
    Ids prompt = system_ids;
    for (const Ids& t : turns) prompt.insert(prompt.end(), t.begin(), t.end());
    prompt.insert(prompt.end(), user.begin(), user.end());
    EXPECT_EQ(chat.stats().prompt_tokens(), static_cast<int64_t>(prompt.size()));
    const std::string fresh = Call(*reference_, CreateRequest()).create_session().session_id();
    v1::Request reference_request = GenerateRequest(fresh, prompt, 8);
    reference_request.mutable_generate()->set_use_kv_cache(false);
    // Chat bans eot here and the role tokens always.
    for (int32_t banned : {special_.eot, special_.sys, special_.usr, special_.asst}) {
      reference_request.mutable_generate()->mutable_sampling()->add_banned_ids(banned);
    }
    const v1::Response reference = Call(*reference_, reference_request);
    ASSERT_TRUE(reference.has_generate()) << reference.DebugString();
    EXPECT_EQ(ToIds(chat.reply_ids()), ToIds(reference.generate().new_ids())) << "turn " << i;
    Ids turn = user;
    const Ids reply = ToIds(chat.reply_ids());
    turn.insert(turn.end(), reply.begin(), reply.end());
    turn.push_back(special_.eot);
    turns.push_back(turn);
    prompt.insert(prompt.end(), reply.begin(), reply.end());
    prompt.push_back(special_.eot);
    ASSERT_EQ(Tokens(id), prompt) << "turn " << i;
  }
  EXPECT_GE(truncations, 2);
  // Logprobs too, after the last truncation.
  ExpectEqualsFullForward(id, Prompt(3), 4, "after the chat");
}

TEST_F(KvSharingTest, OverflowDropsWholeTurnsDownToTheLowWaterMarkAndEqualsTheFullForward) {
  ChatPastTheContextLimit({});
}

// A KV budget of 10 blocks: the session alone fills up to 8 (128 positions), so a truncating turn
// fits only if the blocks of the dropped history are given back before the kept history is
// prefilled again (5 blocks at most: 64 tokens, the turn and its 8 reply tokens).
TEST_F(KvSharingTest, TruncatingTurnNeedsNoMoreMemoryThanItsNewHistory) {
  const uint64_t block_bytes = 2ull * model_->config.layers * model_->config.width * sizeof(float) * kBlock;
  EngineOptions tight;
  tight.kv_budget_bytes = 10 * ((block_bytes + 4095) / 4096 * 4096);
  ChatPastTheContextLimit(tight);
}

}  // namespace kv_sharing_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
