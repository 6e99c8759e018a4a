// Sampling.logit_bias through a real nielsd and the client library: a large bias makes greedy pick
// its id at every step (Generate and Chat); a -inf or -100 bias on the greedy pick changes the
// output and the id never appears; the reported logprobs are those of the biased logits, checked
// against the unbiased run's by hand; bad entries are refused naming them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace logit_bias_test {

constexpr int kSteps = 12;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

class LogitBiasTest : public IntegrationTest {
 protected:
  void SetUp() override {
    IntegrationTest::SetUp();
    StartDaemon();
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
    auto info = client_->Info();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    info_ = *info;
    auto prompt = client_->Tokenize("the socket is", {.add_special = true, .parse_special = false});
    ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
    prompt_.assign(prompt->ids().begin(), prompt->ids().end());
  }

  // A greedy Generate of kSteps ids on a fresh session after prompt_ (eot banned, so every run has
  // kSteps ids), with logprobs and 20 alternatives, and the given bias.
  v1::GenerateResponse Run(const std::map<int32_t, float>& bias) {
    auto session = client_->CreateSession(std::nullopt);
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    v1::GenerateRequest request;
    request.set_session_id(session->session_id());
    request.mutable_input_ids()->Add(prompt_.begin(), prompt_.end());
    request.set_max_new_tokens(kSteps);
    request.set_want_logprobs(true);
    request.set_top_logprobs(20);
    request.mutable_sampling()->set_temperature(0);
    request.mutable_sampling()->add_banned_ids(info_.eot_id());
    for (const auto& [id, b] : bias) {
      v1::TokenBias* entry = request.mutable_sampling()->add_logit_bias();
      entry->set_id(id);
      entry->set_bias(b);
    }
    auto response = client_->Generate(request);
    EXPECT_TRUE(response.ok()) << response.status().ToString();
    if (!response.ok()) return {};
    EXPECT_EQ(response->new_ids_size(), kSteps);
    EXPECT_EQ(response->steps_size(), kSteps);
    return *response;
  }

  static std::vector<int32_t> Ids(const v1::GenerateResponse& r) { return {r.new_ids().begin(), r.new_ids().end()}; }

  // The alternatives of one step as id -> logprob.
  static std::map<int32_t, double> Top(const v1::StepInfo& step) {
    std::map<int32_t, double> top;
    for (const v1::TokenAlternative& alt : step.top()) top[alt.id()] = alt.logprob();
    return top;
  }

  std::unique_ptr<client::DaemonClient> client_;
  v1::InfoResponse info_;
  std::vector<int32_t> prompt_;
};

// Step 0 of a biased run conditions on the same prompt as the unbiased run's step 0, so its
// logprobs follow from the unbiased ones: with bias b on id f only,
//   logprob'(f) = logprob(f) + b - log(1 - p_f + p_f e^b),  logprob'(j) = logprob(j) - log(1 - p_f + p_f e^b).
TEST_F(LogitBiasTest, GreedyFollowsTheBiasAndLogprobsAreOfTheBiasedLogits) {
  const v1::GenerateResponse plain = Run({});
  ASSERT_EQ(plain.steps_size(), kSteps);
  const v1::StepInfo& first = plain.steps(0);
  ASSERT_EQ(first.top_size(), 20);
  const int32_t greedy = first.top(0).id();
  EXPECT_EQ(plain.new_ids(0), greedy);
  // The best alternative that can be sampled (eot is banned here; alternatives are listed before
  // banned ids are taken out).
  int second_rank = 1;
  while (second_rank < first.top_size() && first.top(second_rank).id() == info_.eot_id()) ++second_rank;
  ASSERT_LT(second_rank, first.top_size());
  const int32_t second = first.top(second_rank).id();
  const std::map<int32_t, double> plain_top = Top(first);

  // A moderate bias that lifts the second best above the best.
  const double gap = first.top(0).logprob() - first.top(second_rank).logprob();
  const float b = static_cast<float>(gap + 1.5);
  const v1::GenerateResponse lifted = Run({{second, b}});
  ASSERT_EQ(lifted.steps_size(), kSteps);
  EXPECT_EQ(lifted.new_ids(0), second);
  const double p_f = std::exp(plain_top.at(second));
  const double log_norm = std::log(1.0 - p_f + p_f * std::exp(static_cast<double>(b)));
  EXPECT_NEAR(lifted.steps(0).logprob(), plain_top.at(second) + b - log_norm, 2e-5);
  int compared = 0;
  for (const auto& [id, logprob] : Top(lifted.steps(0))) {
    if (!plain_top.count(id)) continue;  // beyond the unbiased run's 20
    const double want = id == second ? plain_top.at(id) + b - log_norm : plain_top.at(id) - log_norm;
    EXPECT_NEAR(logprob, want, 2e-5) << "id " << id;
    ++compared;
  }
  EXPECT_GE(compared, 19);
  std::cout << "bias " << b << " on id " << second << ": logprob " << plain_top.at(second) << " -> "
            << lifted.steps(0).logprob() << " (" << compared << " alternatives checked)\n";

  // A large bias: greedy takes the id at every step, with logprob ~0.
  const v1::GenerateResponse forced = Run({{second, 1000.0f}});
  EXPECT_EQ(Ids(forced), std::vector<int32_t>(kSteps, second));
  for (const v1::StepInfo& step : forced.steps()) EXPECT_GT(step.logprob(), -1e-4f);

  // -inf on the greedy pick: the output changes, the id never appears, step 0 takes the second best,
  // and the others' logprobs are renormalised without it: logprob'(j) = logprob(j) - log(1 - p_greedy).
  const v1::GenerateResponse banned = Run({{greedy, kNegInf}});
  ASSERT_EQ(banned.steps_size(), kSteps);
  EXPECT_NE(Ids(banned), Ids(plain));
  EXPECT_EQ(banned.new_ids(0), second);
  for (int32_t id : banned.new_ids()) EXPECT_NE(id, greedy);
  const double log_rest = std::log1p(-std::exp(plain_top.at(greedy)));
  const std::map<int32_t, double> banned_top = Top(banned.steps(0));
  EXPECT_FALSE(banned_top.count(greedy)) << "a -inf id is not among the 20 best";
  for (const auto& [id, logprob] : banned_top) {
    if (plain_top.count(id)) {
      EXPECT_NEAR(logprob, plain_top.at(id) - log_rest, 2e-5) << "id " << id;
    }
  }

  // -100 (OpenAI's end of the range) is an addition, not a ban, but on this model the same ids; the
  // id keeps a (tiny) finite logprob.
  const v1::GenerateResponse minus_100 = Run({{greedy, -100.0f}});
  EXPECT_EQ(Ids(minus_100), Ids(banned));
  for (int32_t id : minus_100.new_ids()) EXPECT_NE(id, greedy);

  // The bias is per request: a session continued without it samples as before.
  const v1::GenerateResponse again = Run({});
  EXPECT_EQ(Ids(again), Ids(plain));
}

TEST_F(LogitBiasTest, ChatFollowsTheBias) {
  auto text = client_->Tokenize("socket");
  ASSERT_TRUE(text.ok() && text->ids_size() > 0);
  const int32_t favoured = text->ids(0);
  auto session = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(session.ok());
  v1::ChatRequest plain_request = GreedyChat(session->session_id(), "say something", 8);
  auto plain = client_->Chat(plain_request);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  auto other = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(other.ok());
  v1::ChatRequest request = GreedyChat(other->session_id(), "say something", 8);
  v1::TokenBias* entry = request.mutable_sampling()->add_logit_bias();
  entry->set_id(favoured);
  entry->set_bias(1000.0f);
  auto biased = client_->Chat(request);
  ASSERT_TRUE(biased.ok()) << biased.status().ToString();
  EXPECT_EQ(std::vector<int32_t>(biased->reply_ids().begin(), biased->reply_ids().end()),
            std::vector<int32_t>(8, favoured));
  EXPECT_NE(biased->reply(), plain->reply());
}

TEST_F(LogitBiasTest, BadEntriesAreRefusedNamingThem) {
  auto session = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(session.ok());
  auto refused = [&](const std::vector<std::pair<int32_t, float>>& bias) {
    v1::GenerateRequest request;
    request.set_session_id(session->session_id());
    request.mutable_input_ids()->Add(prompt_.begin(), prompt_.end());
    request.set_max_new_tokens(2);
    for (const auto& [id, b] : bias) {
      v1::TokenBias* entry = request.mutable_sampling()->add_logit_bias();
      entry->set_id(id);
      entry->set_bias(b);
    }
    auto response = client_->Generate(request);
    EXPECT_FALSE(response.ok());
    EXPECT_EQ(response.status().code(), common::StatusCode::kInvalidArgument);
    return response.status().message();
  };
  const int64_t vocab = info_.vocab_size();
  EXPECT_EQ(refused({{3, 1.0f}, {static_cast<int32_t>(vocab), 2.0f}}),
            "sampling.logit_bias[1]: id " + std::to_string(vocab) + " is outside the vocabulary [0, " +
                std::to_string(vocab) + ")");
  EXPECT_EQ(refused({{3, 1.0f}, {3, 2.0f}}), "sampling.logit_bias[1]: id 3 already has a bias (sampling.logit_bias[0])");
  EXPECT_NE(refused({{3, std::numeric_limits<float>::infinity()}}).find("sampling.logit_bias[0]: the bias must be finite or -inf"),
            std::string::npos);
  // Nothing was generated: the session is empty still.
  auto got = client_->GetSession(session->session_id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->session().length(), 0);
}

}  // namespace logit_bias_test
}  // namespace niels::integration
