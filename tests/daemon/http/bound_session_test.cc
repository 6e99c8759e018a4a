#include "daemon/http/bound_session.h"

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon/http/anthropic_messages.h"
#include "daemon/http/openai_chat.h"
#include "daemon/http/openai_completions.h"

namespace niels::daemon::http {
namespace {

using nlohmann::json;

constexpr const char* kId = "0123456789abcdef0123456789abcdef";
constexpr const char* kOtherId = "fedcba9876543210fedcba9876543210";

const ModelView kModel{.id = "tiny", .context = 64, .reasoning = false, .vocab_size = 100};

json Chat(json extra = json::object()) {
  json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  body.update(extra);
  return body;
}

TEST(BoundSessionTest, TheFieldOrTheHeaderBindsARequest) {
  ChatPlan plan;
  ASSERT_FALSE(MapChatCompletion(Chat(), kModel, &plan));
  EXPECT_FALSE(plan.session);
  ChatPlan by_field;
  ASSERT_FALSE(MapChatCompletion(Chat({{"nielsd_session", kId}}), kModel, &by_field));
  EXPECT_EQ(by_field.session, kId);
  ChatPlan by_header;
  ASSERT_FALSE(MapChatCompletion(Chat(), kModel, &by_header, kId));
  EXPECT_EQ(by_header.session, kId);
  ChatPlan both;
  ASSERT_FALSE(MapChatCompletion(Chat({{"nielsd_session", kId}}), kModel, &both, kId));
  EXPECT_EQ(both.session, kId);

  MessagesPlan messages;
  ASSERT_FALSE(MapMessages({{"model", "tiny"}, {"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}},
                           kModel, &messages, kId));
  EXPECT_EQ(messages.session, kId);
  CompletionPlan completion;
  ASSERT_FALSE(MapCompletion({{"prompt", "Hi"}, {"nielsd_session", kId}}, kModel, &completion));
  EXPECT_EQ(completion.session, kId);
}

TEST(BoundSessionTest, BadValuesAre400sNamingTheField) {
  struct Case {
    json extra;
    std::optional<std::string> header;
    const char* param;
  };
  const std::vector<Case> cases = {
      {{{"nielsd_session", 7}}, std::nullopt, "nielsd_session"},
      {{{"nielsd_session", ""}}, std::nullopt, "nielsd_session"},
      {{{"nielsd_session", std::string(kId).substr(1)}}, std::nullopt, "nielsd_session"},
      {{{"nielsd_session", std::string(kId) + "0"}}, std::nullopt, "nielsd_session"},
      {{{"nielsd_session", "0123456789ABCDEF0123456789ABCDEF"}}, std::nullopt, "nielsd_session"},
      {json::object(), "not a session", "X-Nielsd-Session"},
      {json::object(), std::string(kId) + ", " + kId, "X-Nielsd-Session"},
      {{{"nielsd_session", kOtherId}}, std::string(kId), "nielsd_session"},
      {{{"nielsd_session", kId}, {"n", 2}}, std::nullopt, "n"},
  };
  for (const Case& c : cases) {
    ChatPlan plan;
    std::optional<ApiError> error = MapChatCompletion(Chat(c.extra), kModel, &plan, c.header);
    ASSERT_TRUE(error) << c.extra.dump();
    EXPECT_EQ(error->status, 400u) << c.extra.dump();
    EXPECT_EQ(error->param, c.param) << c.extra.dump();
    EXPECT_EQ(error->message.rfind(std::string(c.param) + ":", 0), 0u) << error->message;
  }
  // n > 1 stays fine without a session.
  ChatPlan plan;
  EXPECT_FALSE(MapChatCompletion(Chat({{"n", 2}}), kModel, &plan));
  // Anthropic's in its shape.
  MessagesPlan messages;
  std::optional<ApiError> error = MapMessages(
      {{"model", "tiny"}, {"max_tokens", 4}, {"nielsd_session", 1}, {"messages", {{{"role", "user"}, {"content", "x"}}}}},
      kModel, &messages);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->shape, ErrorShape::kAnthropic);
  EXPECT_EQ(error->param, "nielsd_session");
}

v1::ChatMessage Message(const std::string& role, const std::string& content) {
  v1::ChatMessage message;
  message.set_role(role);
  message.set_content(content);
  return message;
}

v1::GetSessionResponse Session(std::optional<std::string> system, const std::vector<v1::ChatMessage>& messages) {
  v1::GetSessionResponse session;
  session.mutable_session()->set_session_id(kId);
  if (system) *session.add_messages() = Message("system", *system);
  for (const v1::ChatMessage& message : messages) *session.add_messages() = message;
  return session;
}

std::vector<std::string> Contents(const v1::ChatRequest& chat) {
  std::vector<std::string> out;
  for (const v1::ChatMessage& message : chat.messages()) out.push_back(message.role() + ":" + message.content());
  return out;
}

v1::ChatRequest Conversation(const std::vector<v1::ChatMessage>& messages) {
  v1::ChatRequest chat;
  for (const v1::ChatMessage& message : messages) *chat.add_messages() = message;
  return chat;
}

TEST(BoundSessionTest, TheRequestKeepsWhatTheSessionHoldsAndSendsTheRest) {
  const v1::ChatMessage u1 = Message("user", "one"), a1 = Message("assistant", "reply one"),
                        u2 = Message("user", "two"), a2 = Message("assistant", "reply two"),
                        u3 = Message("user", "three");
  const v1::GetSessionResponse session = Session("sys", {u1, a1, u2, a2});
  v1::CreateSessionRequest create;

  // The next turn: everything kept, the new user message sent.
  v1::ChatRequest next = Conversation({u1, a1, u2, a2, u3});
  ASSERT_FALSE(PlanOnSession(session, create, "messages[0]", &next));
  EXPECT_EQ(next.keep_messages(), 4);
  EXPECT_EQ(Contents(next), (std::vector<std::string>{"user:three"}));

  // Regenerate: the conversation up to the last user message again.
  v1::ChatRequest again = Conversation({u1, a1, u2});
  ASSERT_FALSE(PlanOnSession(session, create, "messages[0]", &again));
  EXPECT_EQ(again.keep_messages(), 2);
  EXPECT_EQ(Contents(again), (std::vector<std::string>{"user:two"}));

  // An edited reply: kept up to the user message before it, the rest sent.
  v1::ChatRequest edited = Conversation({u1, Message("assistant", "edited"), u2});
  ASSERT_FALSE(PlanOnSession(session, create, "messages[0]", &edited));
  EXPECT_EQ(edited.keep_messages(), 0);
  EXPECT_EQ(Contents(edited), (std::vector<std::string>{"user:one", "assistant:edited", "user:two"}));

  // Another conversation entirely, as user_text.
  v1::ChatRequest fresh;
  fresh.set_user_text("hello");
  ASSERT_FALSE(PlanOnSession(session, create, "messages[0]", &fresh));
  EXPECT_TRUE(fresh.user_text().empty());
  EXPECT_EQ(fresh.keep_messages(), 0);
  EXPECT_EQ(Contents(fresh), (std::vector<std::string>{"user:hello"}));

  // A tool call differs by its arguments.
  v1::ChatMessage call = Message("assistant", "");
  v1::ToolCall* made = call.add_tool_calls();
  made->set_id("c1");
  made->set_name("f");
  made->set_arguments("{}");
  v1::ChatMessage result = Message("tool", "42");
  result.set_tool_call_id("c1");
  const v1::GetSessionResponse with_call = Session(std::nullopt, {u1, call, result, a1});
  v1::ChatRequest follow = Conversation({u1, call, result, a1, u2});
  ASSERT_FALSE(PlanOnSession(with_call, create, "messages[0]", &follow));
  EXPECT_EQ(follow.keep_messages(), 4);
  v1::ChatMessage other_call = call;
  other_call.mutable_tool_calls(0)->set_arguments("{\"x\": 1}");
  v1::ChatRequest changed = Conversation({u1, other_call, result, a1, u2});
  ASSERT_FALSE(PlanOnSession(with_call, create, "messages[0]", &changed));
  EXPECT_EQ(changed.keep_messages(), 0);
}

TEST(BoundSessionTest, TheSystemPromptIsTheSessionsAndToolsReplaceItsOwn) {
  const v1::GetSessionResponse session = Session("sys", {});
  v1::CreateSessionRequest same;
  same.set_system_prompt("sys");
  v1::ChatRequest chat;
  chat.set_user_text("hi");
  EXPECT_FALSE(PlanOnSession(session, same, "messages[0]", &chat));
  EXPECT_FALSE(chat.has_tools());

  v1::CreateSessionRequest other;
  other.set_system_prompt("another");
  v1::ChatRequest refused;
  refused.set_user_text("hi");
  std::optional<ApiError> error = PlanOnSession(session, other, "system", &refused);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status, 400u);
  EXPECT_EQ(error->param, "system");
  // An empty system prompt is the same as none.
  v1::CreateSessionRequest empty;
  empty.set_system_prompt("");
  v1::ChatRequest plain;
  plain.set_user_text("hi");
  EXPECT_FALSE(PlanOnSession(Session(std::nullopt, {}), empty, "messages[0]", &plain));

  v1::CreateSessionRequest with_tools;
  with_tools.mutable_tools()->add_tools()->set_name("f");
  v1::ChatRequest tooled;
  tooled.set_user_text("hi");
  EXPECT_FALSE(PlanOnSession(session, with_tools, "messages[0]", &tooled));
  ASSERT_TRUE(tooled.has_tools());
  EXPECT_EQ(tooled.tools().tools(0).name(), "f");
}

}  // namespace
}  // namespace niels::daemon::http
