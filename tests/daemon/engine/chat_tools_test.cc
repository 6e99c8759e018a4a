// ReplyToolCalls: a reply's answer text split into content and tool calls with daemon-made ids, the
// same whether fed whole or in pieces (as the stream feeds it), capped at kMaxToolCallsPerReply
// calls; ToolCallIds never repeats an id of the conversation.
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/engine/chat_tools.h"

namespace niels::daemon::engine {
namespace {

using tool_calls::ToolCallFamily;

const std::vector<text::ToolDefinition> kTools = {
    {"get_weather", "the weather of a city", R"({"type": "object", "properties": {"city": {"type": "string"}}})"},
    {"add", "", ""}};

// Feeds `text` in seeded random pieces, as a stream would, and joins what comes out.
std::pair<std::string, std::vector<text::ToolCall>> FeedInPieces(ToolCallFamily family, std::string_view text,
                                                                 std::shared_ptr<ToolCallIds> ids, uint32_t seed) {
  ReplyToolCalls parser(family, kTools, /*calls_allowed=*/true, std::move(ids));
  std::mt19937 random(seed);
  std::string content;
  std::vector<text::ToolCall> calls;
  const auto take = [&](ReplyToolCalls::Piece piece) {
    content += piece.content;
    for (const ToolCallPiece& call : piece.calls) {
      if (call.index >= calls.size()) {
        EXPECT_EQ(call.index, calls.size()) << "calls come in index order";
        EXPECT_FALSE(call.name.empty()) << "a call's first piece names it";
        calls.push_back({call.id, call.name, ""});
      }
      calls[call.index].arguments += call.arguments;
    }
  };
  size_t at = 0;
  while (at < text.size()) {
    const size_t length = std::min<size_t>(text.size() - at, random() % 7);
    take(parser.Feed(text.substr(at, length)));
    at += length;
  }
  take(parser.Finish());
  return {content, calls};
}

TEST(ChatToolsTest, HermesCallsParseWithIdsAndTheTextStaysContent) {
  const std::string reply =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": [1, {\"b\": 2}]}}\n</tool_call>";
  auto ids = std::make_shared<ToolCallIds>(std::span<const text::ChatMessage>());
  auto [content, calls] = ReplyToolCalls::Parse(ToolCallFamily::kHermes, kTools, true, ids, reply);
  EXPECT_EQ(content, "Let me check.\n\n");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(calls[1].name, "add");
  EXPECT_EQ(calls[1].arguments, "{\"a\": [1, {\"b\": 2}]}");
  EXPECT_TRUE(calls[0].id.starts_with("call_"));
  EXPECT_NE(calls[0].id, calls[1].id);
  // The stream shares the ids object with the commit: the same ids, whatever the pieces.
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    auto [streamed_content, streamed_calls] = FeedInPieces(ToolCallFamily::kHermes, reply, ids, seed);
    EXPECT_EQ(streamed_content, content) << "seed " << seed;
    EXPECT_EQ(streamed_calls, calls) << "seed " << seed;
  }
}

TEST(ChatToolsTest, Llama3JsonCallAndMalformedOrUnknownCallsStayContent) {
  auto ids = std::make_shared<ToolCallIds>(std::span<const text::ChatMessage>());
  auto [content, calls] = ReplyToolCalls::Parse(ToolCallFamily::kLlama3Json, kTools, true, ids,
                                                "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"x\": 1}}");
  EXPECT_EQ(content, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "add");
  EXPECT_EQ(calls[0].arguments, "{\"x\": 1}");
  for (const std::string& text : {std::string("{\"name\": \"delete_everything\", \"parameters\": {}}"),
                                 std::string("{\"name\": \"add\", \"parameters\": {\"x\": }"),
                                 std::string("The answer is {\"name\": \"add\"}")}) {
    auto [kept, none] = ReplyToolCalls::Parse(ToolCallFamily::kLlama3Json, kTools, true, ids, text);
    EXPECT_EQ(kept, text);
    EXPECT_TRUE(none.empty());
  }
}

TEST(ChatToolsTest, ToolChoiceNoneLeavesCallsAsContent) {
  const std::string reply = "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>";
  auto ids = std::make_shared<ToolCallIds>(std::span<const text::ChatMessage>());
  auto [content, calls] = ReplyToolCalls::Parse(ToolCallFamily::kHermes, kTools, /*calls_allowed=*/false, ids, reply);
  EXPECT_EQ(content, reply);
  EXPECT_TRUE(calls.empty());
}

TEST(ChatToolsTest, CallsPastTheCapAreContent) {
  const std::string call = "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>";
  std::string reply;
  for (size_t i = 0; i < kMaxToolCallsPerReply + 2; ++i) reply += call;
  auto ids = std::make_shared<ToolCallIds>(std::span<const text::ChatMessage>());
  auto [content, calls] = ReplyToolCalls::Parse(ToolCallFamily::kHermes, kTools, true, ids, reply);
  EXPECT_EQ(calls.size(), kMaxToolCallsPerReply);
  EXPECT_EQ(content, call + call);
  std::set<std::string> distinct;
  for (const text::ToolCall& parsed : calls) distinct.insert(parsed.id);
  EXPECT_EQ(distinct.size(), calls.size());
  auto [streamed_content, streamed_calls] = FeedInPieces(ToolCallFamily::kHermes, reply, ids, 7);
  EXPECT_EQ(streamed_content, content);
  EXPECT_EQ(streamed_calls, calls);
}

TEST(ChatToolsTest, IdsAreNewInTheirConversation) {
  std::vector<text::ChatMessage> conversation = {{text::Role::kUser, "hi", ""}};
  ToolCallIds first(conversation);
  conversation.push_back({text::Role::kAssistant, "", "", {{first.Id(0), "add", "{}"}, {first.Id(1), "add", "{}"}}});
  EXPECT_EQ(first.Id(0), conversation.back().tool_calls[0].id);  // asked again: the same id
  ToolCallIds second(conversation);
  EXPECT_NE(second.Id(0), first.Id(0));
  EXPECT_NE(second.Id(0), first.Id(1));
  EXPECT_EQ(second.Id(0).size(), std::string("call_").size() + 24);
}

}  // namespace
}  // namespace niels::daemon::engine
