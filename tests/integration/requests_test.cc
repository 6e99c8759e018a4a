// Every request type through the real client library against a real nielsd: success paths, error
// paths with their codes, and the daemon still serving afterwards.
#include <algorithm>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

using common::StatusCode;
const std::string kUnknownSession = "0123456789abcdef0123456789abcdef";

class RequestsTest : public IntegrationTest {
 protected:
  void SetUp() override {
    IntegrationTest::SetUp();
    StartDaemon();
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
    auto info = client_->Info();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    info_ = *info;
  }
  std::unique_ptr<client::DaemonClient> client_;
  niels::v1::InfoResponse info_;
};

TEST_F(RequestsTest, InfoDescribesTheLoadedModel) {
  const auto config = IntegrationConfig();
  EXPECT_EQ(info_.vocab_size(), config.vocab_size);
  EXPECT_EQ(info_.context(), config.context);
  EXPECT_EQ(info_.width(), config.width);
  EXPECT_EQ(info_.layers(), config.layers);
  EXPECT_EQ(info_.heads(), config.heads);
  EXPECT_EQ(info_.d_ff(), config.d_ff);
  EXPECT_EQ(info_.protocol_version(), 1u);
  std::vector<int32_t> specials = {info_.sys_id(), info_.usr_id(), info_.asst_id(), info_.eot_id()};
  std::sort(specials.begin(), specials.end());
  EXPECT_EQ(std::unique(specials.begin(), specials.end()), specials.end());
  EXPECT_FALSE(info_.daemon_version().empty());
}

TEST_F(RequestsTest, TokenizeDetokenizeRoundTripAndRangeErrors) {
  const std::string text = testing::TinyCorpus().front();
  auto tokens = client_->Tokenize(text);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  ASSERT_FALSE(tokens->ids().empty());
  EXPECT_EQ(tokens->ids_size(), tokens->pieces_size());
  auto text_back = client_->Detokenize({tokens->ids().begin(), tokens->ids().end()});
  ASSERT_TRUE(text_back.ok());
  EXPECT_EQ(text_back->text(), text);
  auto bad = client_->Detokenize({static_cast<int32_t>(info_.vocab_size())});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RequestsTest, SessionLifecycle) {
  auto tokens = client_->Tokenize("be brief");
  ASSERT_TRUE(tokens.ok());
  auto created = client_->CreateSession(std::string("be brief"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string id = created->session_id();
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(created->length(), tokens->ids_size() + 2);  // [sys] text [eot]
  auto bare = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->length(), 0);
  EXPECT_NE(bare->session_id(), id);

  auto chat = client_->Chat(GreedyChat(id, "hello there"));
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_LE(chat->reply_ids_size(), 6);
  auto got = client_->GetSession(id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->session().length(), got->token_ids_size());
  EXPECT_EQ(got->session().length(), chat->session_length());
  EXPECT_EQ(got->session().turns(), 1);
  EXPECT_TRUE(got->session().has_system_prompt());
  EXPECT_EQ(got->token_ids(0), info_.sys_id());

  auto listed = client_->ListSessions();
  ASSERT_TRUE(listed.ok());
  std::vector<std::string> ids;
  for (const auto& session : listed->sessions()) ids.push_back(session.session_id());
  std::sort(ids.begin(), ids.end());
  std::vector<std::string> expected = {id, bare->session_id()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ids, expected);

  // Fork: same history; the fork's next turn leaves the parent alone.
  auto fork = client_->ForkSession(id);
  ASSERT_TRUE(fork.ok());
  EXPECT_EQ(fork->length(), got->session().length());
  auto forked = client_->GetSession(fork->session_id());
  ASSERT_TRUE(forked.ok());
  EXPECT_TRUE(std::equal(forked->token_ids().begin(), forked->token_ids().end(), got->token_ids().begin(),
                         got->token_ids().end()));
  ASSERT_TRUE(client_->Chat(GreedyChat(fork->session_id(), "and more")).ok());
  auto parent = client_->GetSession(id);
  ASSERT_TRUE(parent.ok());
  EXPECT_EQ(parent->session().length(), got->session().length());

  // Reset: back to the system prompt.
  auto reset = client_->ResetSession(id);
  ASSERT_TRUE(reset.ok());
  EXPECT_EQ(reset->length(), created->length());

  // Delete: gone, and a second delete is NOT_FOUND.
  ASSERT_TRUE(client_->DeleteSession(id).ok());
  auto after = client_->GetSession(id);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), StatusCode::kNotFound);
  auto again = client_->DeleteSession(id);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kNotFound);
}

TEST_F(RequestsTest, UnknownSessionIsNotFoundForEveryRequestThatTakesOne) {
  EXPECT_EQ(client_->Chat(GreedyChat(kUnknownSession, "hi")).status().code(), StatusCode::kNotFound);
  niels::v1::GenerateRequest generate;
  generate.set_session_id(kUnknownSession);
  EXPECT_EQ(client_->Generate(generate).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->GetSession(kUnknownSession).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->ForkSession(kUnknownSession).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->ResetSession(kUnknownSession).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->DeleteSession(kUnknownSession).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(client_->Info().ok());  // still serving
}

TEST_F(RequestsTest, GenerateRawCacheSemantics) {
  auto created = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(created.ok());
  const std::string id = created->session_id();
  auto tokens = client_->Tokenize(testing::TinyCorpus().front());
  ASSERT_TRUE(tokens.ok());

  // max_new_tokens = 0 only prefills the input.
  niels::v1::GenerateRequest prefill;
  prefill.set_session_id(id);
  prefill.mutable_input_ids()->CopyFrom(tokens->ids());
  prefill.set_max_new_tokens(0);
  auto prefilled = client_->Generate(prefill);
  ASSERT_TRUE(prefilled.ok()) << prefilled.status().ToString();
  EXPECT_EQ(prefilled->new_ids_size(), 0);
  EXPECT_EQ(prefilled->session_length(), tokens->ids_size());

  // Empty input continues from the cache state; only the new ids come back.
  niels::v1::GenerateRequest next;
  next.set_session_id(id);
  next.set_max_new_tokens(5);
  next.mutable_sampling()->set_temperature(0);
  next.set_want_logprobs(true);
  next.set_top_logprobs(3);
  auto generated = client_->Generate(next);
  ASSERT_TRUE(generated.ok()) << generated.status().ToString();
  ASSERT_GE(generated->new_ids_size(), 1);
  EXPECT_LE(generated->new_ids_size(), 5);
  EXPECT_EQ(generated->session_length(), tokens->ids_size() + generated->new_ids_size());
  ASSERT_EQ(generated->steps_size(), generated->new_ids_size());
  for (const auto& step : generated->steps()) {
    EXPECT_LE(step.logprob(), 0.0f);
    EXPECT_EQ(step.top_size(), 3);
  }
  EXPECT_EQ(generated->stats().prompt_tokens(), tokens->ids_size());

  // Errors: an id outside the vocabulary, too many alternatives.
  niels::v1::GenerateRequest bad = next;
  bad.add_input_ids(static_cast<int32_t>(info_.vocab_size()));
  EXPECT_EQ(client_->Generate(bad).status().code(), StatusCode::kInvalidArgument);
  bad = next;
  bad.set_top_logprobs(1001);
  EXPECT_EQ(client_->Generate(bad).status().code(), StatusCode::kInvalidArgument);
  // The failed requests left the session as it was.
  auto got = client_->GetSession(id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->session().length(), generated->session_length());
}

TEST_F(RequestsTest, ChatArgumentErrors) {
  auto created = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(created.ok());
  niels::v1::ChatRequest zero = GreedyChat(created->session_id(), "hi");
  zero.set_max_new_tokens(0);
  EXPECT_EQ(client_->Chat(zero).status().code(), StatusCode::kInvalidArgument);
  // A turn that cannot fit the context even after dropping every old turn.
  std::string huge;
  for (int i = 0; i < 400; ++i) huge += testing::TinyCorpus()[i % testing::TinyCorpus().size()] + " ";
  auto too_long = client_->Chat(GreedyChat(created->session_id(), huge));
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  auto got = client_->GetSession(created->session_id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->session().length(), 0);
}

TEST_F(RequestsTest, CancelOfNothingAndStats) {
  auto cancel = client_->Cancel(12345);
  ASSERT_TRUE(cancel.ok());
  EXPECT_FALSE(cancel->found());
  ASSERT_TRUE(client_->CreateSession(std::nullopt).ok());
  ASSERT_TRUE(client_->CreateSession(std::nullopt).ok());
  auto second = Connect();
  ASSERT_TRUE(second->Info().ok());
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions(), 2u);
  EXPECT_EQ(stats->connections(), 2u);
  EXPECT_GE(stats->requests_total(), 4u);
}

// The KV block pool's figures through a real daemon: a system prompt shared by two sessions is
// stored once, a fork adds no block, and --context-keep is accepted.
TEST_F(RequestsTest, SharedPrefixesShowInStatsAndGetSession) {
  daemon_->Stop();
  testing::DaemonProcessOptions options = DaemonOptions();
  options.extra_args.push_back("--context-keep");
  options.extra_args.push_back("0.25");
  daemon_ = testing::DaemonProcess::Start(options);
  client_ = Connect();
  ASSERT_NE(client_, nullptr);
  std::string system;
  for (int i = 0; i < 6; ++i) system += testing::TinyCorpus().at(static_cast<size_t>(i) % 3) + " ";
  auto a = client_->CreateSession(system);
  auto b = client_->CreateSession(system);
  ASSERT_TRUE(a.ok() && b.ok());
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  auto info = client_->GetSession(b->session_id());
  ASSERT_TRUE(info.ok());
  const int64_t length = info->session().length();
  const int64_t full = length / 16;
  const int64_t tail = length % 16 != 0 ? 1 : 0;
  ASSERT_GE(full, 2);
  EXPECT_EQ(stats->kv_block_tokens(), 16u);
  EXPECT_GT(stats->kv_blocks_total(), 0u);
  EXPECT_EQ(stats->kv_blocks_used(), static_cast<uint32_t>(full + 2 * tail));
  EXPECT_EQ(stats->kv_blocks_shared(), static_cast<uint32_t>(full));
  EXPECT_EQ(stats->kv_bytes(), stats->kv_blocks_used() * stats->kv_block_bytes());
  EXPECT_EQ(stats->prefix_hit_tokens(), static_cast<uint64_t>(full * 16));
  EXPECT_GT(stats->prefix_hit_rate(), 0.0);
  EXPECT_LT(stats->prefix_hit_rate(), 1.0);
  EXPECT_EQ(info->session().kv_shared_blocks(), full);
  EXPECT_EQ(info->session().kv_own_blocks(), tail);

  auto fork = client_->ForkSession(b->session_id());
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  auto after_fork = client_->Stats();
  ASSERT_TRUE(after_fork.ok());
  EXPECT_EQ(after_fork->kv_blocks_used(), stats->kv_blocks_used());
  auto fork_info = client_->GetSession(fork->session_id());
  ASSERT_TRUE(fork_info.ok());
  EXPECT_EQ(fork_info->session().kv_own_blocks(), 0);
  EXPECT_EQ(fork_info->session().kv_shared_blocks(), full + tail);
}

// (A durable daemon unloads an idle session instead: durable_sessions_test.cc.)
TEST_F(RequestsTest, SessionLimitIsResourceExhausted) {
  daemon_->Stop();
  testing::DaemonProcessOptions options = DaemonOptions();
  options.extra_args.push_back("--max-sessions");
  options.extra_args.push_back("2");
  options.extra_args.push_back("--ephemeral");
  daemon_ = testing::DaemonProcess::Start(options);
  client_ = Connect();
  ASSERT_TRUE(client_->CreateSession(std::nullopt).ok());
  ASSERT_TRUE(client_->CreateSession(std::nullopt).ok());
  auto third = client_->CreateSession(std::nullopt);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(client_->Info().ok());
}

}  // namespace
}  // namespace niels::integration
