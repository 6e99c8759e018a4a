// The budgets of common/budgets.h through the service: Info lists every one with this model's
// numbers, a request past one is refused with its code and a message naming it, and Stats counts
// the refusal under its name.

#include <cstdint>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "common/budgets.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace budgets_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 64;

v1::Request InfoRequest() {
  v1::Request request;
  request.mutable_info();
  return request;
}

v1::Request StatsRequest() {
  v1::Request request;
  request.mutable_stats();
  return request;
}

uint64_t RefusedUnder(Service& engine, std::string_view name) {
  const v1::Response stats = Call(engine, StatsRequest());
  for (const v1::BudgetRefusals& r : stats.stats().budget_refusals()) {
    if (r.name() == name) return r.refused();
  }
  ADD_FAILURE() << "Stats lists no budget " << name;
  return 0;
}

TEST(BudgetsTest, InfoListsEveryBudgetWithTheModelsNumbers) {
  auto engine = StartEngine(kContext);
  const v1::Response info = Call(*engine, InfoRequest());
  ASSERT_TRUE(info.has_info()) << info.DebugString();
  std::set<std::string> listed;
  for (const v1::Budget& budget : info.info().budgets()) {
    listed.insert(budget.name());
    EXPECT_FALSE(budget.unit().empty()) << budget.name();
    EXPECT_FALSE(budget.bounds().empty()) << budget.name();
    EXPECT_TRUE(budget.refusal() == v1::RESOURCE_EXHAUSTED || budget.refusal() == v1::INVALID_ARGUMENT) << budget.name();
    EXPECT_GT(budget.per_request_byte() + budget.per_new_token() + budget.fixed(), 0u) << budget.name();
    if (budget.name() == "banned_ids" || budget.name() == "logit_bias") {
      EXPECT_EQ(budget.fixed(), static_cast<uint64_t>(info.info().vocab_size()));
    }
    if (budget.name() == "stop_ids") {
      EXPECT_EQ(budget.fixed(), common::kStopIdsLimit);
    }
  }
  for (const common::Budget& budget : common::Budgets()) {
    EXPECT_TRUE(listed.count(std::string(budget.name))) << "Info does not list " << budget.name;
  }
  EXPECT_EQ(listed.size(), common::Budgets().size());
}

TEST(BudgetsTest, ARefusalNamesItsBudgetAndIsCounted) {
  auto engine = StartEngine(kContext);
  const uint64_t before = RefusedUnder(*engine, "tokenize_text_bytes");
  v1::Request tokenize;
  tokenize.mutable_tokenize()->set_text(std::string(common::kTokenizeTextBytesLimit + 1, 'a'));
  const v1::Response refused = Call(*engine, tokenize);
  ASSERT_EQ(ErrorOf(refused), v1::INVALID_ARGUMENT) << refused.DebugString();
  EXPECT_NE(refused.error().message().find("(budget tokenize_text_bytes)"), std::string::npos)
      << refused.error().message();
  EXPECT_EQ(RefusedUnder(*engine, "tokenize_text_bytes"), before + 1);
  // Within the limit it is served, and nothing more is counted.
  tokenize.mutable_tokenize()->set_text(std::string(1000, 'a'));
  EXPECT_TRUE(Call(*engine, tokenize).has_tokenize());
  EXPECT_EQ(RefusedUnder(*engine, "tokenize_text_bytes"), before + 1);
}

TEST(BudgetsTest, AChatTurnsUserTextIsBoundedBeforeTheEngineEncodesIt) {
  auto engine = StartEngine(kContext);
  const v1::Response created = Call(*engine, CreateRequest());
  ASSERT_TRUE(created.has_create_session()) << created.DebugString();
  const std::string session = created.create_session().session_id();
  const uint64_t before = RefusedUnder(*engine, "user_text_bytes");
  const v1::Response refused =
      Call(*engine, ChatRequest(session, std::string(common::kUserTextBytesLimit + 1, 'a'), 2));
  ASSERT_EQ(ErrorOf(refused), v1::INVALID_ARGUMENT) << refused.DebugString();
  EXPECT_NE(refused.error().message().find("(budget user_text_bytes)"), std::string::npos)
      << refused.error().message();
  EXPECT_NE(refused.error().message().find(std::to_string(common::kUserTextBytesLimit)), std::string::npos);
  EXPECT_EQ(RefusedUnder(*engine, "user_text_bytes"), before + 1);
  // The refusal changed nothing: the session is still empty, and an ordinary turn is served.
  const v1::Response turn = Call(*engine, ChatRequest(session, "hello there", 2));
  ASSERT_TRUE(turn.has_chat()) << turn.DebugString();
  EXPECT_EQ(RefusedUnder(*engine, "user_text_bytes"), before + 1);
}

TEST(BudgetsTest, AllowanceIsLinearAndSaturates) {
  EXPECT_EQ(common::Allowance(common::BudgetId::kStopIds, 12345, 99), common::kStopIdsLimit);
  for (const common::Budget& budget : common::Budgets()) {
    EXPECT_EQ(common::Allowance(budget.id, UINT64_MAX, UINT64_MAX) >= budget.fixed, true) << budget.name;
  }
}

}  // namespace budgets_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
