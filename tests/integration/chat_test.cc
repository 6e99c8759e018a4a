// Multi-turn chat through a real nielsd: the KV cache is reused across turns (only the new turn is
// prefilled), the uncached path gives the same greedy replies, and concurrent connections get the
// same replies as sequential ones.
#include <thread>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

const std::vector<std::string> kTurns = {"hello there", "what does nielsd do?", "tell me more",
                                         "how fast is it", "thanks, bye"};

class ChatTest : public IntegrationTest {
 protected:
  void SetUp() override {
    IntegrationTest::SetUp();
    StartDaemon();
  }
};

// Runs the 5 turns on a fresh session; returns the reply ids of each turn.
std::vector<std::vector<int32_t>> RunChat(client::DaemonClient& client, bool use_kv_cache,
                                          std::optional<uint64_t> seed = std::nullopt) {
  auto created = client.CreateSession(std::string("you are terse."));
  EXPECT_TRUE(created.ok());
  std::vector<std::vector<int32_t>> replies;
  for (const std::string& text : kTurns) {
    niels::v1::ChatRequest request = GreedyChat(created->session_id(), text, 8);
    request.set_use_kv_cache(use_kv_cache);
    if (seed) {
      request.mutable_sampling()->set_temperature(0.9f);
      request.mutable_sampling()->set_seed(*seed);
    }
    auto reply = client.Chat(request);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) break;
    EXPECT_EQ(reply->stats().used_kv_cache(), use_kv_cache);
    replies.emplace_back(reply->reply_ids().begin(), reply->reply_ids().end());
  }
  return replies;
}

TEST_F(ChatTest, FollowUpTurnsPrefillOnlyTheirNewTokens) {
  auto client = Connect();
  auto created = client->CreateSession(std::string("you are terse."));
  ASSERT_TRUE(created.ok());
  const std::string id = created->session_id();
  for (size_t turn = 0; turn < kTurns.size(); ++turn) {
    auto before = client->GetSession(id);
    ASSERT_TRUE(before.ok());
    auto text_ids = client->Tokenize(kTurns[turn]);
    ASSERT_TRUE(text_ids.ok());
    const int64_t turn_tokens = text_ids->ids_size() + 3;  // [usr] text [eot] [asst]
    auto reply = client->Chat(GreedyChat(id, kTurns[turn], 8));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    const auto& stats = reply->stats();
    const int64_t history = before->session().length();
    const int64_t cached = before->session().cached_tokens();
    SCOPED_TRACE("turn " + std::to_string(turn + 1));
    EXPECT_TRUE(stats.used_kv_cache());
    EXPECT_EQ(reply->truncated_turns(), 0);
    // The model conditioned on the whole history plus the new turn.
    EXPECT_EQ(stats.prompt_tokens(), history + turn_tokens);
    EXPECT_EQ(stats.reused_tokens() + stats.prefilled_tokens(), stats.prompt_tokens());
    if (turn == 0) continue;
    // From turn 2 on: everything already cached is reused; the prefill covers the new turn plus at
    // most the previous reply's uncached tail (its last sampled token and the closing eot).
    EXPECT_EQ(stats.reused_tokens(), cached);
    EXPECT_GE(cached, history - 2);
    EXPECT_GE(stats.prefilled_tokens(), turn_tokens);
    EXPECT_LE(stats.prefilled_tokens(), turn_tokens + 2);
  }
}

TEST_F(ChatTest, UncachedPathGivesIdenticalGreedyReplies) {
  auto client = Connect();
  std::vector<std::vector<int32_t>> cached = RunChat(*client, /*use_kv_cache=*/true);
  std::vector<std::vector<int32_t>> uncached = RunChat(*client, /*use_kv_cache=*/false);
  ASSERT_EQ(cached.size(), kTurns.size());
  EXPECT_EQ(cached, uncached);
  size_t total = 0;
  for (const auto& reply : cached) total += reply.size();
  EXPECT_GT(total, 0u);  // the comparison is not vacuous
}

TEST_F(ChatTest, ConcurrentConnectionsGetTheSameRepliesAsSequential) {
  auto first = Connect();
  auto second = Connect();
  // Sequential reference, sampled with fixed seeds.
  auto reference_a = RunChat(*first, true, 11);
  auto reference_b = RunChat(*second, true, 22);
  std::vector<std::vector<int32_t>> concurrent_a, concurrent_b;
  std::thread a([&] { concurrent_a = RunChat(*first, true, 11); });
  std::thread b([&] { concurrent_b = RunChat(*second, true, 22); });
  a.join();
  b.join();
  EXPECT_EQ(concurrent_a, reference_a);
  EXPECT_EQ(concurrent_b, reference_b);
  EXPECT_NE(reference_a, reference_b);  // different seeds really sample differently
}

}  // namespace
}  // namespace niels::integration
