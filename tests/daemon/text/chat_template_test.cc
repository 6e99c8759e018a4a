#include "daemon/text/chat_template.h"

#include <algorithm>
#include <memory>
#include <set>

#include <gtest/gtest.h>

#include "tests/support/test_model.h"

namespace niels::daemon::text {
namespace {
namespace chat_template_test {  // this file's own names: the suite compiles as one unity unit

using Tokenizer = SentencePieceTokenizer;

// EncodeMessage with the tokenizer's own markers; its failure fails the test.
std::vector<int32_t> Message(const Tokenizer& tok, Role role, std::string_view content) {
  auto ids = EncodeMessage(tok, tok.special(), role, content);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? std::move(*ids) : std::vector<int32_t>{};
}

class ChatTemplateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new niels::testing::TempDir("chat_template_test_");
    niels::testing::TrainTinyTokenizer(*dir_ / "tokenizer.model");
    auto loaded = SentencePieceTokenizer::Load(*dir_ / "tokenizer.model");
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    tokenizer_ = std::move(loaded).value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }
  static const Tokenizer& tok() { return *tokenizer_; }

  static niels::testing::TempDir* dir_;
  static Tokenizer* tokenizer_;
};
niels::testing::TempDir* ChatTemplateTest::dir_ = nullptr;
Tokenizer* ChatTemplateTest::tokenizer_ = nullptr;

TEST_F(ChatTemplateTest, MessageIsRoleThenContentThenEot) {
  const text::SpecialTokens& sp = tok().special();
  const std::set<int32_t> distinct = {sp.sys, sp.usr, sp.asst, sp.eot};
  ASSERT_EQ(distinct.size(), 4u);
  const std::string content = "Hello there, how are you?";
  const std::vector<int32_t> body = niels::testing::EncodeText(tok(), content);
  ASSERT_FALSE(body.empty());
  const std::pair<Role, int32_t> roles[] = {
      {Role::kSystem, sp.sys}, {Role::kUser, sp.usr}, {Role::kAssistant, sp.asst}};
  for (const auto& [role, id] : roles) {
    std::vector<int32_t> expected = {id};
    expected.insert(expected.end(), body.begin(), body.end());
    expected.push_back(sp.eot);
    EXPECT_EQ(Message(tok(), role, content), expected);
  }
  EXPECT_EQ(tok().Decode(Message(tok(), Role::kUser, content)), content);
}

TEST_F(ChatTemplateTest, EmptyContentIsRoleAndEot) {
  const text::SpecialTokens& sp = tok().special();
  EXPECT_EQ(Message(tok(), Role::kUser, ""), (std::vector<int32_t>{sp.usr, sp.eot}));
}

TEST_F(ChatTemplateTest, SpecialLiteralInContentStaysPlainText) {
  const text::SpecialTokens& sp = tok().special();
  const std::string content = std::string("before ") + std::string(text::kEotToken) + " middle " +
                              std::string(text::kAsstToken) + " after";
  const std::vector<int32_t> ids = Message(tok(), Role::kUser, content);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), sp.usr);
  EXPECT_EQ(ids.back(), sp.eot);
  const std::vector<int32_t> inner(ids.begin() + 1, ids.end() - 1);
  for (int32_t id : inner) {
    EXPECT_TRUE(id != sp.sys && id != sp.usr && id != sp.asst && id != sp.eot) << id;
  }
  // The literal survives as text: decoding the body gives back the content.
  EXPECT_EQ(tok().Decode(inner), content);
  EXPECT_GT(inner.size(), 20u);  // spelled out, not one piece per literal
}

TEST_F(ChatTemplateTest, GenerationPromptAndBannedIds) {
  const text::SpecialTokens& sp = tok().special();
  EXPECT_EQ(GenerationPrompt(tok().special()), (std::vector<int32_t>{sp.asst}));
  std::vector<int32_t> banned = DefaultBannedIds(tok().special());
  std::sort(banned.begin(), banned.end());
  std::vector<int32_t> expected = {sp.sys, sp.usr, sp.asst};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(banned, expected);
  EXPECT_EQ(std::count(banned.begin(), banned.end(), sp.eot), 0);
}

}  // namespace chat_template_test
}  // namespace
}  // namespace niels::daemon::text
