// Conversations as messages and tools through the Service, on random-weight models of real shapes
// with their real tokenizers and templates (tests/support/reference_chat_model.h): Qwen3 (Hermes
// tool calls) and Llama 3.2 (JSON tool calls; the package's Llama 3.1 template has no tool support). Tools set on the session are rendered at every turn;
// messages with assistant tool calls and tool results render as the template writes them and the
// next turn reuses the KV cache up to the first differing token; append_only, keep_messages and
// GetSession; every bad input is INVALID_ARGUMENT naming its field and changes nothing.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/text/generic_tool_format.h"
#include "daemon/text/jinja_chat_format.h"
#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/handlers/service_fixture.h"
#include "tests/support/sanitizer.h"
#include "tests/support/reference_chat_model.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace tool_chat_test {  // this file's own names: the suite compiles as one unity unit

constexpr uint64_t kSeed = 11;
const char* kWeatherSchema = R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})";

// A service on a random-weight model of `name` with its real template (or `chat_template`), one
// kernel thread; null when the model's references are missing.
std::unique_ptr<Service> StartService(const std::string& name, const std::string& chat_template = "",
                                      EngineOptions options = {}) {
  std::unique_ptr<loaders::Model> model = niels::testing::ReferenceChatModel(name, kSeed, chat_template);
  if (model == nullptr) return nullptr;
  options.threads = 1;
  return std::make_unique<Service>(std::make_unique<engine::Engine>(std::move(model), options));
}

std::unique_ptr<text::JinjaChatFormat> Format(const std::string& name) {
  text::testing::ReferenceChat chat = text::testing::LoadReferenceChat(name);
  if (chat.tokenizer == nullptr) return nullptr;
  static std::vector<std::unique_ptr<text::Tokenizer>> keep;  // the format refers to its tokenizer
  auto format = text::JinjaChatFormat::Create(chat.source);
  keep.push_back(std::move(chat.tokenizer));
  if (!format.ok()) return nullptr;
  return std::move(format).value();
}

void AddWeatherTool(v1::ToolSet& tools) {
  v1::Tool& tool = *tools.add_tools();
  tool.set_name("get_weather");
  tool.set_description("The current weather of a city");
  tool.set_parameters(kWeatherSchema);
}

std::vector<text::ToolDefinition> WeatherTools() {
  return {{"get_weather", "The current weather of a city", kWeatherSchema}};
}

std::string CreateSession(Service& service, const std::string& system, bool with_tools) {
  v1::Request request = CreateRequest(&system);
  if (with_tools) AddWeatherTool(*request.mutable_create_session()->mutable_tools());
  v1::Response response = Call(service, request);
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

v1::ChatMessage Message(const std::string& role, const std::string& content) {
  v1::ChatMessage message;
  message.set_role(role);
  message.set_content(content);
  return message;
}

// user, assistant calling get_weather (client-made id "call_paris"), the tool's result.
std::vector<v1::ChatMessage> WeatherExchange() {
  v1::ChatMessage call = Message("assistant", "");
  v1::ToolCall& made = *call.add_tool_calls();
  made.set_id("call_paris");
  made.set_name("get_weather");
  made.set_arguments(R"({"city": "Paris"})");
  v1::ChatMessage result = Message("tool", R"({"temperature_c": 21})");
  result.set_tool_call_id("call_paris");
  result.set_name("get_weather");
  return {Message("user", "What is the weather in Paris?"), call, result};
}

v1::Request MessagesRequest(const std::string& session, const std::vector<v1::ChatMessage>& messages,
                            int max_new_tokens) {
  v1::Request request = ChatRequest(session, "", max_new_tokens);
  for (const v1::ChatMessage& message : messages) *request.mutable_chat()->add_messages() = message;
  request.mutable_chat()->set_enable_thinking(false);
  return request;
}

// The session's conversation as the engine's messages (from GetSession), and its tokens.
struct Conversation {
  std::vector<text::ChatMessage> messages;
  std::vector<int32_t> tokens;
};
Conversation Read(Service& service, const std::string& session) {
  const v1::Response got = Call(service, GetRequest(session));
  EXPECT_TRUE(got.has_get_session()) << got.DebugString();
  Conversation out;
  out.tokens.assign(got.get_session().token_ids().begin(), got.get_session().token_ids().end());
  for (const v1::ChatMessage& message : got.get_session().messages()) {
    if (message.role() == "system") continue;
    text::ChatMessage converted;
    converted.role = message.role() == "user" ? text::Role::kUser
                     : message.role() == "tool" ? text::Role::kTool
                                                : text::Role::kAssistant;
    converted.content = message.content();
    converted.reasoning = message.reasoning();
    for (const v1::ToolCall& call : message.tool_calls()) converted.tool_calls.push_back({call.id(), call.name(), call.arguments()});
    converted.tool_call_id = message.tool_call_id();
    converted.name = message.name();
    out.messages.push_back(std::move(converted));
  }
  return out;
}

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

TEST(ToolChatTest, InfoNamesTheToolCallFormatAndTheBudgets) {
  for (const auto& [name, format] : {std::pair{"qwen3", "hermes"}, std::pair{"llama3_2", "llama3_json"}, std::pair{"llama3_1", "generic_json"}}) {
    std::unique_ptr<Service> service = StartService(name);
    ASSERT_NE(service, nullptr);
    v1::Request request;
    request.mutable_info();
    const v1::Response response = Call(*service, request);
    ASSERT_TRUE(response.has_info());
    EXPECT_EQ(response.info().tool_call_format(), format) << name;
    std::vector<std::string> budgets;
    for (const v1::Budget& budget : response.info().budgets()) budgets.push_back(budget.name());
    for (const char* expected : {"chat_messages", "chat_message_bytes", "tools", "tool_bytes", "tool_calls_per_reply"}) {
      EXPECT_NE(std::find(budgets.begin(), budgets.end(), expected), budgets.end()) << expected;
    }
  }
}

// A conversation with a tool call and its result, sent as messages to a session with tools: the
// prompt is the template's rendering of the tools, the call (arguments as an object) and the result;
// the follow-up turn renders the stored call again and reuses the cache up to the first differing
// token.
TEST(ToolChatTest, ToolResultTurnRendersTheCallAndTheNextTurnReusesThePrefix) {
  for (const std::string name : {"qwen3", "llama3_2"}) {
    std::unique_ptr<Service> service = StartService(name);
    ASSERT_NE(service, nullptr);
    std::unique_ptr<text::JinjaChatFormat> format = Format(name);
    ASSERT_NE(format, nullptr);
    const std::string system = "You are a weather bot.";
    const std::string session = CreateSession(*service, system, /*with_tools=*/true);
    text::ChatOptions options;
    options.enable_thinking = false;
    options.tools = std::make_shared<const std::vector<text::ToolDefinition>>(WeatherTools());

    const v1::Response first = Call(*service, MessagesRequest(session, WeatherExchange(), 6));
    ASSERT_TRUE(first.has_chat()) << name << ": " << first.DebugString();
    EXPECT_EQ(first.chat().messages(), 4);
    Conversation after_first = Read(*service, session);
    ASSERT_EQ(after_first.messages.size(), 4u);
    EXPECT_EQ(after_first.messages[1].tool_calls,
              (std::vector<text::ToolCall>{{"call_paris", "get_weather", R"({"city": "Paris"})"}}));
    EXPECT_EQ(after_first.messages[2].tool_call_id, "call_paris");
    const std::vector<text::ChatMessage> sent(after_first.messages.begin(), after_first.messages.begin() + 3);
    auto prompt = format->EncodeConversation(system, sent, options);
    ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
    EXPECT_EQ(first.chat().stats().prompt_tokens(), static_cast<int64_t>(prompt->ids.size())) << name;
    auto rendered = format->Render(system, sent, std::nullopt, true, options);
    ASSERT_TRUE(rendered.ok());
    EXPECT_NE(rendered->find("get_weather"), std::string::npos) << *rendered;
    EXPECT_NE(rendered->find("Paris"), std::string::npos) << *rendered;
    EXPECT_NE(rendered->find("temperature_c"), std::string::npos) << *rendered;

    // The follow-up: prefilled only from the first token where the new rendering differs.
    v1::Request follow = MessagesRequest(session, {Message("user", "And tomorrow?")}, 4);
    const v1::Response second = Call(*service, follow);
    ASSERT_TRUE(second.has_chat()) << second.DebugString();
    std::vector<text::ChatMessage> next = after_first.messages;
    next.push_back({text::Role::kUser, "And tomorrow?", ""});
    auto next_prompt = format->EncodeConversation(system, next, options);
    ASSERT_TRUE(next_prompt.ok());
    const v1::GenerationStats& stats = second.chat().stats();
    EXPECT_EQ(stats.prompt_tokens(), static_cast<int64_t>(next_prompt->ids.size())) << name;
    const size_t shared = std::min(CommonPrefix(after_first.tokens, next_prompt->ids), next_prompt->ids.size() - 1);
    EXPECT_EQ(stats.reused_tokens(), static_cast<int64_t>(shared)) << name;
    // Reused: at least the sent conversation as rendered without the generation prompt (Qwen3 writes
    // the reply's empty think block only while it is the last message).
    auto closed = format->Render(system, sent, std::nullopt, false, options);
    ASSERT_TRUE(closed.ok());
    auto closed_ids = format->Encode(*closed);
    ASSERT_TRUE(closed_ids.ok());
    EXPECT_GE(shared, closed_ids->size()) << name << ": the tool call's rendering is reused";
    EXPECT_EQ(stats.reused_tokens() + stats.prefilled_tokens(), stats.prompt_tokens()) << name;
  }
}

// A tool loop where the model made the call: its reply, sampled under tool_choice required on random
// weights, spells the call its own way (byte pieces for `<tool_call>`, other JSON whitespace), and
// the template writes the stored call back canonically. Where the template writes that reply the same
// way whether it ends the conversation or is followed by the new messages, the session keeps the
// sampled ids for it: the result turn's prompt is the whole history plus the rendering of what
// follows the reply, and it prefills only that (and the reply's uncomputed stop id). Llama 3.2
// writes a call the same way wherever it stands; Qwen3 writes a reply's think block only while it is
// the last message or its reasoning is not empty, and drops it once a new user message follows, so
// there the turn renders the conversation as the template writes it and reuses the cache up to the
// first difference, as a conversation sent whole does.
TEST(ToolChatTest, AToolResultTurnAfterASampledCallPrefillsOnlyWhatFollowsTheCall) {
  struct Case {
    std::string model;
    bool thinking;
  };
  size_t kept_replies = 0;
  size_t rendered_again = 0;
  for (const Case& c : {Case{"llama3_2", false}, Case{"qwen3", true}, Case{"qwen3", false}}) {
    std::unique_ptr<Service> service = StartService(c.model);
    ASSERT_NE(service, nullptr);
    std::unique_ptr<text::JinjaChatFormat> format = Format(c.model);
    ASSERT_NE(format, nullptr);
    const std::string system = "You are a weather bot.";
    text::ChatOptions options;
    options.enable_thinking = c.thinking;
    options.tools = std::make_shared<const std::vector<text::ToolDefinition>>(WeatherTools());
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const std::string label = c.model + (c.thinking ? " thinking" : "") + " seed " + std::to_string(seed);
      const std::string session = CreateSession(*service, system, /*with_tools=*/true);
      v1::Request call = MessagesRequest(session, {Message("user", "Weather in Oslo?")}, 96);
      call.mutable_chat()->set_enable_thinking(c.thinking);
      call.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
      call.mutable_chat()->mutable_sampling()->set_seed(seed);
      call.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::REQUIRED);
      const v1::Response called = Call(*service, call);
      ASSERT_TRUE(called.has_chat()) << label << ": " << called.DebugString();
      ASSERT_EQ(called.chat().stop_reason(), v1::TOOL_CALLS) << label << ": " << called.chat().reply();
      const Conversation before = Read(*service, session);
      ASSERT_EQ(before.messages.size(), 2u) << label;
      const text::ChatMessage& reply = before.messages[1];
      ASSERT_FALSE(reply.tool_calls.empty()) << label;

      std::vector<v1::ChatMessage> results;
      std::vector<text::ChatMessage> conversation = before.messages;
      for (const text::ToolCall& made : reply.tool_calls) {
        v1::ChatMessage result = Message("tool", R"({"temperature_c": 3})");
        result.set_tool_call_id(made.id);
        result.set_name(made.name);
        results.push_back(result);
        text::ChatMessage stored{text::Role::kTool, R"({"temperature_c": 3})", ""};
        stored.tool_call_id = made.id;
        stored.name = made.name;
        conversation.push_back(stored);
      }
      v1::Request follow = MessagesRequest(session, results, 4);
      follow.mutable_chat()->set_enable_thinking(c.thinking);
      const v1::Response answered = Call(*service, follow);
      ASSERT_TRUE(answered.has_chat()) << label << ": " << answered.DebugString();
      const v1::GenerationStats& stats = answered.chat().stats();
      const Conversation after = Read(*service, session);
      auto rendering = format->EncodeConversation(system, conversation, options);
      ASSERT_TRUE(rendering.ok()) << rendering.status().ToString();
      EXPECT_EQ(stats.reused_tokens() + stats.prefilled_tokens(), stats.prompt_tokens()) << label;
      const bool keeps = c.model == "llama3_2" || !reply.reasoning.empty();
      if (keeps) {
        // The history stands whole; what follows it is the rendering's own end (the results and the
        // generation prompt).
        ++kept_replies;
        const size_t tail = static_cast<size_t>(stats.prompt_tokens()) - before.tokens.size();
        // The cache held all of the history but its stop id (and its last text id when the grammar
        // ended the reply: neither was run through the model).
        EXPECT_GE(stats.reused_tokens(), static_cast<int64_t>(before.tokens.size()) - 2) << label;
        EXPECT_LE(stats.prefilled_tokens(), static_cast<int64_t>(tail + 2)) << label;
        ASSERT_GE(after.tokens.size(), before.tokens.size() + tail) << label;
        // The sampled ids stand, ended on the template's end of turn (the model may have ended on
        // another stop id).
        EXPECT_TRUE(std::equal(before.tokens.begin(), before.tokens.end() - 1, after.tokens.begin())) << label;
        EXPECT_EQ(after.tokens[before.tokens.size() - 1], format->stop_ids().front()) << label;
        ASSERT_LE(tail, rendering->ids.size());
        EXPECT_TRUE(std::equal(rendering->ids.end() - static_cast<std::ptrdiff_t>(tail), rendering->ids.end(),
                               after.tokens.begin() + static_cast<std::ptrdiff_t>(before.tokens.size())))
            << label;
        // The reply's own ids differ from the template's spelling: without them the turn would have
        // re-prefilled from the call.
        EXPECT_LT(std::min(CommonPrefix(before.tokens, rendering->ids), rendering->ids.size() - 1),
                  before.tokens.size() - 1)
            << label << ": the model spelled its call as the template does (the test shows nothing)";
      } else {
        ++rendered_again;
        EXPECT_EQ(stats.prompt_tokens(), static_cast<int64_t>(rendering->ids.size())) << label;
        EXPECT_TRUE(std::equal(rendering->ids.begin(), rendering->ids.end(), after.tokens.begin())) << label;
        EXPECT_EQ(stats.reused_tokens(),
                  static_cast<int64_t>(std::min(CommonPrefix(before.tokens, rendering->ids), rendering->ids.size() - 1)))
            << label;
      }

      // A new user message: Llama 3.2 keeps both replies' ids; Qwen3 drops the reasoning of replies
      // before the new question, so the prompt is the template's rendering.
      std::vector<text::ChatMessage> next = after.messages;
      next.push_back({text::Role::kUser, "Thanks.", ""});
      v1::Request thanks = MessagesRequest(session, {Message("user", "Thanks.")}, 2);
      thanks.mutable_chat()->set_enable_thinking(c.thinking);
      const v1::Response thanked = Call(*service, thanks);
      ASSERT_TRUE(thanked.has_chat()) << label << ": " << thanked.DebugString();
      auto next_rendering = format->EncodeConversation(system, next, options);
      ASSERT_TRUE(next_rendering.ok());
      if (c.model == "qwen3") {
        EXPECT_EQ(thanked.chat().stats().prompt_tokens(), static_cast<int64_t>(next_rendering->ids.size())) << label;
        const Conversation last = Read(*service, session);
        EXPECT_TRUE(std::equal(next_rendering->ids.begin(), next_rendering->ids.end(), last.tokens.begin())) << label;
      } else {
        // The sampled call still stands (the answer, cut by max_new_tokens, is the template's again).
        const Conversation last = Read(*service, session);
        ASSERT_GE(last.tokens.size(), before.tokens.size());
        EXPECT_TRUE(std::equal(before.tokens.begin(), before.tokens.end() - 1, last.tokens.begin())) << label;
        EXPECT_GE(thanked.chat().stats().reused_tokens(), static_cast<int64_t>(before.tokens.size())) << label;
      }
    }
  }
  std::cout << "[ tools ] result turns keeping the sampled call: " << kept_replies << ", rendered again: "
            << rendered_again << "\n";
  EXPECT_GE(kept_replies, 4u);
}

// The generic tool format on a template without tool support (the package's Llama 3.1 template):
// the prompt is the template's rendering of the conversation rewritten by GenericToolChatFormat (the
// tool block in the system message, the call as the assistant's content, the result as a user
// message); a forced call is parsed into a call whose stored message renders back as the text the
// model sampled, and a tool result's turn reuses the cache past the system prompt and the tools.
TEST(ToolChatTest, GenericToolFormatOnATemplateWithoutToolSupport) {
  std::unique_ptr<Service> service = StartService("llama3_1");
  ASSERT_NE(service, nullptr);
  std::unique_ptr<text::JinjaChatFormat> jinja = Format("llama3_1");
  ASSERT_NE(jinja, nullptr);
  const text::JinjaChatFormat& inner = *jinja;
  text::GenericToolChatFormat format(std::move(jinja));
  const std::string system = "You are a weather bot.";
  const std::string session = CreateSession(*service, system, /*with_tools=*/true);
  text::ChatOptions options;
  options.enable_thinking = false;
  options.tools = std::make_shared<const std::vector<text::ToolDefinition>>(WeatherTools());

  const v1::Response first = Call(*service, MessagesRequest(session, WeatherExchange(), 4));
  ASSERT_TRUE(first.has_chat()) << first.DebugString();
  Conversation after_first = Read(*service, session);
  ASSERT_EQ(after_first.messages.size(), 4u);
  EXPECT_EQ(after_first.messages[2].role, text::Role::kTool) << "the stored messages keep their roles";
  const std::vector<text::ChatMessage> sent(after_first.messages.begin(), after_first.messages.begin() + 3);
  auto prompt = format.EncodeConversation(system, sent, options);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(first.chat().stats().prompt_tokens(), static_cast<int64_t>(prompt->ids.size()));
  EXPECT_TRUE(std::equal(prompt->ids.begin(), prompt->ids.end(), after_first.tokens.begin()));
  const text::RewrittenConversation rewritten = text::GenericToolConversation(system, sent, options.tools.get());
  auto rendered = inner.Render(rewritten.system_prompt, rewritten.messages, std::nullopt, true, {});
  ASSERT_TRUE(rendered.ok());
  for (const char* part : {"You are a weather bot.\n\n# Tools\n", "{\"name\": \"get_weather\"",
                           R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]})",
                           R"({"tool_results": [{"name": "get_weather", "content": "{\"temperature_c\": 21}"}]})"}) {
    EXPECT_NE(rendered->find(part), std::string::npos) << part << " in\n" << *rendered;
  }

  // A forced call, then its result: the call renders back as what was sampled.
  v1::Request forced = MessagesRequest(session, {Message("user", "And in Oslo?")}, 48);
  forced.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::NAMED);
  forced.mutable_chat()->mutable_tool_choice()->set_name("get_weather");
  const v1::Response called = Call(*service, forced);
  ASSERT_TRUE(called.has_chat()) << called.DebugString();
  ASSERT_EQ(called.chat().stop_reason(), v1::TOOL_CALLS) << called.chat().reply();
  ASSERT_EQ(called.chat().tool_calls_size(), 1);
  EXPECT_EQ(called.chat().reply(), "");
  Conversation after_call = Read(*service, session);
  ASSERT_EQ(after_call.messages.size(), 6u);
  const text::ChatMessage& call_message = after_call.messages.back();
  ASSERT_EQ(call_message.tool_calls.size(), 1u);
  EXPECT_TRUE(nlohmann::json::accept(call_message.tool_calls[0].arguments)) << call_message.tool_calls[0].arguments;
  const int64_t reply_begin = called.chat().stats().prompt_tokens();
  ASSERT_GE(static_cast<int64_t>(after_call.tokens.size()), reply_begin);
  const std::vector<int32_t> reply_ids(after_call.tokens.begin() + reply_begin, after_call.tokens.end());
  std::string sampled = text::testing::LoadReferenceChat("llama3_1").tokenizer->Decode(reply_ids);
  // But for JSON whitespace after the arguments, which the parser does not keep.
  const std::string& arguments = call_message.tool_calls[0].arguments;
  const size_t end = sampled.find(arguments) + arguments.size();
  ASSERT_GE(end, arguments.size()) << sampled;
  sampled.erase(end, sampled.find_first_not_of(" \t\n\r", end) - end);
  EXPECT_EQ(text::GenericToolConversation(std::nullopt, {&call_message, 1}, nullptr).messages[0].content, sampled);

  v1::ChatMessage result = Message("tool", "cloudy");
  result.set_tool_call_id(call_message.tool_calls[0].id);
  const v1::Response answered = Call(*service, MessagesRequest(session, {result}, 2));
  ASSERT_TRUE(answered.has_chat()) << answered.DebugString();
  const v1::GenerationStats& stats = answered.chat().stats();
  EXPECT_GE(stats.reused_tokens(), reply_begin - 8) << "the cache is reused up to the call";
  EXPECT_EQ(stats.reused_tokens() + stats.prefilled_tokens(), stats.prompt_tokens());
}

// Tools are rendered at every turn: a session with tools prompts longer than one without, by
// exactly the template's rendering of them; ChatRequest.tools replaces them (empty: none).
TEST(ToolChatTest, SessionToolsAreRenderedAtEveryTurnAndCanBeReplaced) {
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  std::unique_ptr<text::JinjaChatFormat> format = Format("qwen3");
  ASSERT_NE(format, nullptr);
  const std::string system = "be brief";
  const std::string session = CreateSession(*service, system, true);
  text::ChatOptions options;
  options.enable_thinking = false;
  options.tools = std::make_shared<const std::vector<text::ToolDefinition>>(WeatherTools());
  const v1::Response response = Call(*service, MessagesRequest(session, {Message("user", "hi")}, 2));
  ASSERT_TRUE(response.has_chat()) << response.DebugString();
  auto with_tools = format->EncodeConversation(system, std::vector<text::ChatMessage>{{text::Role::kUser, "hi", ""}}, options);
  ASSERT_TRUE(with_tools.ok());
  EXPECT_EQ(response.chat().stats().prompt_tokens(), static_cast<int64_t>(with_tools->ids.size()));

  // Cleared by an empty ToolSet: the next rendering has none.
  v1::Request cleared = MessagesRequest(session, {Message("user", "again")}, 2);
  cleared.mutable_chat()->mutable_tools();
  const v1::Response second = Call(*service, cleared);
  ASSERT_TRUE(second.has_chat()) << second.DebugString();
  Conversation now = Read(*service, session);
  text::ChatOptions no_tools;
  no_tools.enable_thinking = false;
  std::vector<text::ChatMessage> sent(now.messages.begin(), now.messages.end() - 1);
  auto without = format->EncodeConversation(system, sent, no_tools);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(second.chat().stats().prompt_tokens(), static_cast<int64_t>(without->ids.size()));
}

// append_only adds messages without a reply; keep_messages then replies to a cut conversation
// (regenerating the last reply); GetSession returns tool calls and results.
TEST(ToolChatTest, AppendOnlyThenKeepMessagesRegenerates) {
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  const std::string session = CreateSession(*service, "sys", true);
  v1::Request append = MessagesRequest(session, WeatherExchange(), 2);
  append.mutable_chat()->set_append_only(true);
  const v1::Response appended = Call(*service, append);
  ASSERT_TRUE(appended.has_chat()) << appended.DebugString();
  EXPECT_EQ(appended.chat().messages(), 3);
  EXPECT_TRUE(appended.chat().reply_ids().empty());
  EXPECT_EQ(Read(*service, session).messages.size(), 3u);

  v1::Request reply = MessagesRequest(session, {}, 3);
  reply.mutable_chat()->set_keep_messages(3);
  const v1::Response answered = Call(*service, reply);
  ASSERT_TRUE(answered.has_chat()) << answered.DebugString();
  EXPECT_EQ(answered.chat().messages(), 4);
  EXPECT_GT(answered.chat().stats().prompt_tokens(), 0);

  // Regenerate: keep the three sent messages, reply again; the conversation stays four long.
  const v1::Response again = Call(*service, reply);
  ASSERT_TRUE(again.has_chat()) << again.DebugString();
  EXPECT_EQ(again.chat().messages(), 4);
  EXPECT_EQ(again.chat().reply(), answered.chat().reply());  // greedy: the same reply
  const Conversation read = Read(*service, session);
  ASSERT_EQ(read.messages.size(), 4u);
  EXPECT_EQ(read.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(read.messages[2].role, text::Role::kTool);
  EXPECT_EQ(read.messages[2].name, "get_weather");
}

// Each bad request: INVALID_ARGUMENT (or the budget's code) naming the field; the conversation is
// as it was.
TEST(ToolChatTest, BadMessagesAndToolsAreRefusedNamingTheFieldAndChangeNothing) {
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  const std::string session = CreateSession(*service, "sys", true);
  ASSERT_TRUE(Call(*service, MessagesRequest(session, {Message("user", "hi")}, 2)).has_chat());
  const Conversation before = Read(*service, session);

  struct Case {
    std::string what;
    v1::Request request;
    std::string field;
    v1::ErrorCode code = v1::INVALID_ARGUMENT;
  };
  std::vector<Case> cases;
  {
    v1::ChatMessage result = Message("tool", "42");
    result.set_tool_call_id("call_nobody_made");
    cases.push_back({"unknown call id", MessagesRequest(session, {result}, 2), "messages[0].tool_call_id"});
  }
  cases.push_back({"system message", MessagesRequest(session, {Message("system", "obey")}, 2), "messages[0].role"});
  cases.push_back({"unknown role", MessagesRequest(session, {Message("robot", "beep")}, 2), "messages[0].role"});
  {
    std::vector<v1::ChatMessage> exchange = WeatherExchange();
    exchange[1].mutable_tool_calls(0)->set_arguments("[1, 2]");
    cases.push_back({"arguments not an object", MessagesRequest(session, exchange, 2), "messages[1].tool_calls[0].arguments"});
  }
  {
    std::vector<v1::ChatMessage> twice = WeatherExchange();
    const std::vector<v1::ChatMessage> again = WeatherExchange();
    twice.insert(twice.end(), again.begin(), again.begin() + 2);
    cases.push_back({"call id used twice", MessagesRequest(session, twice, 2), "messages[4].tool_calls[0].id"});
  }
  {
    v1::Request request = MessagesRequest(session, {Message("user", "x")}, 2);
    AddWeatherTool(*request.mutable_chat()->mutable_tools());
    AddWeatherTool(*request.mutable_chat()->mutable_tools());
    cases.push_back({"duplicate tool names", request, "tools[1].name"});
  }
  {
    v1::Request request = MessagesRequest(session, {Message("user", "x")}, 2);
    v1::Tool& tool = *request.mutable_chat()->mutable_tools()->add_tools();
    tool.set_name("bad name!");
    cases.push_back({"tool name charset", request, "tools[0].name"});
  }
  {
    v1::Request request = MessagesRequest(session, {Message("user", "x")}, 2);
    v1::Tool& tool = *request.mutable_chat()->mutable_tools()->add_tools();
    tool.set_name("f");
    tool.set_parameters(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}})");
    cases.push_back({"schema that does not compile", request, "tools[0].parameters"});
  }
  {
    v1::Request request = MessagesRequest(session, {Message("user", "x")}, 2);
    for (size_t i = 0; i <= common::kToolsLimit; ++i) request.mutable_chat()->mutable_tools()->add_tools()->set_name("t" + std::to_string(i));
    cases.push_back({"too many tools", request, "budget tools"});
  }
  {
    std::vector<v1::ChatMessage> many(common::kChatMessagesLimit + 1, Message("user", "x"));
    cases.push_back({"too many messages", MessagesRequest(session, many, 2), "budget chat_messages"});
  }
  {
    v1::Request request = MessagesRequest(session, {Message("user", "x")}, 2);
    request.mutable_chat()->set_user_text("and text");
    cases.push_back({"user_text and messages", request, "user_text and messages"});
  }
  {
    v1::Request request = MessagesRequest(session, {}, 2);
    request.mutable_chat()->set_keep_messages(3);
    cases.push_back({"keep_messages beyond the conversation", request, "keep_messages = 3"});
  }
  {
    v1::Request request = MessagesRequest(session, {Message("user", "x")}, 2);
    request.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::NAMED);
    request.mutable_chat()->mutable_tool_choice()->set_name("no_such_tool");
    cases.push_back({"tool_choice naming no tool", request, "tool_choice.name"});
  }
  for (const Case& c : cases) {
    const v1::Response response = Call(*service, c.request);
    ASSERT_TRUE(response.has_error()) << c.what << ": " << response.DebugString();
    EXPECT_EQ(response.error().code(), c.code) << c.what << ": " << response.error().message();
    EXPECT_NE(response.error().message().find(c.field), std::string::npos) << c.what << ": " << response.error().message();
    const Conversation after = Read(*service, session);
    EXPECT_EQ(after.messages, before.messages) << c.what;
    EXPECT_EQ(after.tokens, before.tokens) << c.what;
  }
}

// CreateSession's tools are checked the same way; a model whose template has no tool-call format
// refuses tools.
TEST(ToolChatTest, CreateSessionChecksItsTools) {
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  v1::Request request = CreateRequest();
  AddWeatherTool(*request.mutable_create_session()->mutable_tools());
  request.mutable_create_session()->mutable_tools()->mutable_tools(0)->set_parameters("not json");
  const v1::Response refused = Call(*service, request);
  ASSERT_TRUE(refused.has_error()) << refused.DebugString();
  EXPECT_EQ(refused.error().code(), v1::INVALID_ARGUMENT);
  EXPECT_NE(refused.error().message().find("tools[0].parameters"), std::string::npos) << refused.error().message();

  // A session without a system prompt but with tools: the first turn renders them.
  v1::Request with_tools = CreateRequest();
  AddWeatherTool(*with_tools.mutable_create_session()->mutable_tools());
  const v1::Response created = Call(*service, with_tools);
  ASSERT_TRUE(created.has_create_session()) << created.DebugString();
  std::unique_ptr<text::JinjaChatFormat> format = Format("qwen3");
  ASSERT_NE(format, nullptr);
  const v1::Response chat = Call(*service, MessagesRequest(created.create_session().session_id(), {Message("user", "hi")}, 2));
  ASSERT_TRUE(chat.has_chat()) << chat.DebugString();
  text::ChatOptions options;
  options.enable_thinking = false;
  options.tools = std::make_shared<const std::vector<text::ToolDefinition>>(WeatherTools());
  auto prompt = format->EncodeConversation(std::nullopt, std::vector<text::ChatMessage>{{text::Role::kUser, "hi", ""}}, options);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(chat.chat().stats().prompt_tokens(), static_cast<int64_t>(prompt->ids.size()));

  std::unique_ptr<loaders::Model> plain = niels::testing::ReferenceChatModel(
      "qwen3", kSeed, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ASSERT_NE(plain, nullptr);
  EngineOptions engine_options;
  engine_options.threads = 1;
  // A template without tool support takes tools through the generic format: they are in its
  // prompt, which a session without them does not have.
  Service generic(std::make_unique<engine::Engine>(std::move(plain), engine_options));
  v1::Request info;
  info.mutable_info();
  EXPECT_EQ(Call(generic, info).info().tool_call_format(), "generic_json");
  const v1::Response generic_created = Call(generic, with_tools);
  ASSERT_TRUE(generic_created.has_create_session()) << generic_created.DebugString();
  const std::string bare = CreateSession(generic, "", /*with_tools=*/false);
  const v1::Response with = Call(generic, MessagesRequest(generic_created.create_session().session_id(), {Message("user", "hi")}, 1));
  const v1::Response without = Call(generic, MessagesRequest(bare, {Message("user", "hi")}, 1));
  ASSERT_TRUE(with.has_chat() && without.has_chat()) << with.DebugString() << without.DebugString();
  EXPECT_GT(with.chat().stats().prompt_tokens(), without.chat().stats().prompt_tokens() + 50);
}

// A streamed reply on a session with tools: the events' text joined is the reply (the parser
// passes the answer through), and a reply without calls stops as usual.
TEST(ToolChatTest, StreamedReplyWithToolsAddsUpToTheResponse) {
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  const std::string session = CreateSession(*service, "sys", true);
  v1::Request request = MessagesRequest(session, {Message("user", "Weather in Oslo?")}, 16);
  request.mutable_chat()->set_stream(true);
  request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
  request.mutable_chat()->mutable_sampling()->set_seed(3);
  auto sink = SubmitAsync(*service, request);
  const v1::Response response = sink->Wait();
  ASSERT_TRUE(response.has_chat()) << response.DebugString();
  std::string text;
  std::vector<std::string> arguments(response.chat().tool_calls_size());
  for (const v1::Response& event : sink->events()) {
    text += event.token().text();
    if (event.token().has_tool_call()) {
      const v1::ToolCallDelta& call = event.token().tool_call();
      ASSERT_LT(call.index(), response.chat().tool_calls_size());
      arguments[static_cast<size_t>(call.index())] += call.arguments();
    }
  }
  EXPECT_EQ(text, response.chat().reply());
  for (int i = 0; i < response.chat().tool_calls_size(); ++i) {
    EXPECT_EQ(arguments[static_cast<size_t>(i)], response.chat().tool_calls(i).arguments());
  }
  EXPECT_EQ(response.chat().stop_reason() == v1::TOOL_CALLS, response.chat().tool_calls_size() > 0);
}

// Stop strings end a reply by its text, a constrained reply ends where its grammar does: with a
// forced tool choice they are INVALID_ARGUMENT naming stop_strings, and the session is unchanged;
// under auto the tool grammar yields to them (calls are parsed from the free reply), as it yields
// to the request's own constraint.
TEST(ToolChatTest, StopStringsAndConstraintsWithToolChoices) {
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  const std::string session = CreateSession(*service, "sys", true);
  const Conversation before = Read(*service, session);
  v1::Request forced = MessagesRequest(session, {Message("user", "Weather in Oslo?")}, 16);
  forced.mutable_chat()->add_stop_strings("\n\n");
  forced.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::REQUIRED);
  const v1::Response refused = Call(*service, forced);
  ASSERT_TRUE(refused.has_error()) << refused.DebugString();
  EXPECT_EQ(refused.error().code(), v1::INVALID_ARGUMENT) << refused.DebugString();
  EXPECT_NE(refused.error().message().find("stop_strings"), std::string::npos) << refused.error().message();
  EXPECT_EQ(Read(*service, session).tokens, before.tokens);

  v1::Request with_stop = forced;
  with_stop.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::AUTO);
  const v1::Response stopped = Call(*service, with_stop);
  ASSERT_TRUE(stopped.has_chat()) << stopped.DebugString();
  EXPECT_EQ(stopped.chat().reply().find("\n\n"), std::string::npos) << stopped.chat().reply();

  v1::Request with_constraint = MessagesRequest(session, {Message("user", "Weather in Oslo?")}, 24);
  with_constraint.mutable_chat()->set_keep_messages(0);
  with_constraint.mutable_chat()->mutable_constraint()->mutable_any_json();
  with_constraint.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
  with_constraint.mutable_chat()->mutable_sampling()->set_seed(5);
  const v1::Response constrained = Call(*service, with_constraint);
  ASSERT_TRUE(constrained.has_chat()) << constrained.DebugString();
  if (constrained.chat().stop_reason() != v1::CONSTRAINT_INCOMPLETE) {
    EXPECT_TRUE(nlohmann::json::accept(constrained.chat().reply())) << constrained.chat().reply();
  }
}

// Validates each case ({"schema", "instances": [arguments]}) under python3-jsonschema; every one
// must be valid. Returns how many are.
size_t CountValid(const nlohmann::json& cases) {
  const nlohmann::json verdicts = grammar::testing::RunPython("validate_json.py", cases);
  EXPECT_EQ(verdicts.size(), cases.size());
  size_t valid = 0;
  for (size_t i = 0; i < verdicts.size() && i < cases.size(); ++i) {
    EXPECT_TRUE(verdicts[i][0].is_null()) << cases[i].dump() << ": " << verdicts[i][0];
    valid += verdicts[i][0].is_null() ? 1 : 0;
  }
  return valid;
}

// The one id `text` tokenizes to (special-token text parsed, as the template's structure is).
int32_t SingleId(Service& service, const std::string& text) {
  v1::Request request;
  request.mutable_tokenize()->set_text(text);
  request.mutable_tokenize()->set_parse_special(true);
  const v1::Response response = Call(service, request);
  EXPECT_TRUE(response.has_tokenize()) << response.DebugString();
  EXPECT_EQ(response.tokenize().ids_size(), 1) << text << ": " << response.DebugString();
  return response.tokenize().ids_size() == 1 ? response.tokenize().ids(0) : -1;
}

// Whether the content holds the family's trigger where a call should have followed: Qwen3 (Hermes)
// anywhere, Llama 3.x (JSON) as its first character after whitespace.
bool HoldsTrigger(const std::string& model, const std::string& content) {
  if (model == "qwen3") return content.find("<tool_call>") != std::string::npos;
  const size_t first = content.find_first_not_of(" \t\n\r");
  return first != std::string::npos && content[first] == '{';
}

// tool_choice auto constrains lazily (free text until the family's trigger, then a call by its
// schema). Random weights almost never write the trigger, so a logit bias on it (Qwen3: the
// `<tool_call>` id; Llama 3.2: `{`, whose reply is a call when it starts with one) makes them. At
// temperature 1.0 every Qwen3 reply then calls, a Llama reply calls whenever it starts with `{`,
// no trigger is left in the content, and every call parses and validates. The same requests with a
// stop string (under which auto yields and the reply is parsed as it stands) show what the grammar
// prevents: the trigger then stays in the content where no valid call followed it.
TEST(ToolChatTest, AutoToolChoiceCallsAfterTheTriggerAlwaysParseAndValidate) {
  const std::map<std::string, std::string> triggers = {{"qwen3", "<tool_call>"}, {"llama3_2", "{"}};
  std::map<std::string, size_t> calls_of_model;
  nlohmann::json cases = nlohmann::json::array();
  size_t calls = 0;
  size_t replies = 0;
  size_t malformed_free = 0;
  for (const auto& [model, trigger] : triggers) {
    std::unique_ptr<Service> service = StartService(model);
    ASSERT_NE(service, nullptr) << model;
    const std::string session = CreateSession(*service, "sys", true);
    const int32_t trigger_id = SingleId(*service, trigger);
    ASSERT_GE(trigger_id, 0) << model;
    for (uint64_t seed = 1; seed <= niels::testing::UnlessSanitized<uint64_t>(12, 2); ++seed) {
      for (const bool yielded : {false, true}) {
        v1::Request request = MessagesRequest(session, {Message("user", "Weather in Oslo?")}, 48);
        request.mutable_chat()->set_keep_messages(0);
        request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
        request.mutable_chat()->mutable_sampling()->set_seed(seed);
        v1::TokenBias& bias = *request.mutable_chat()->mutable_sampling()->add_logit_bias();
        bias.set_id(trigger_id);
        bias.set_bias(12.0f);
        if (yielded) request.mutable_chat()->add_stop_strings("\x01 never written");
        const v1::Response response = Call(*service, request);
        ASSERT_TRUE(response.has_chat()) << model << ": " << response.DebugString();
        const v1::ChatResponse& chat = response.chat();
        if (yielded) {
          malformed_free += HoldsTrigger(model, chat.reply()) ? 1 : 0;
          continue;
        }
        ++replies;
        EXPECT_FALSE(HoldsTrigger(model, chat.reply())) << model << " seed " << seed << ": " << chat.reply();
        EXPECT_EQ(chat.stop_reason() == v1::TOOL_CALLS, chat.tool_calls_size() > 0) << model << " seed " << seed;
        if (model == "qwen3") {
          EXPECT_GE(chat.tool_calls_size(), 1) << "seed " << seed << ": " << chat.reply();
        }
        for (const v1::ToolCall& call : chat.tool_calls()) {
          ++calls;
          ++calls_of_model[model];
          EXPECT_EQ(call.name(), "get_weather");
          cases.push_back({{"schema", nlohmann::json::parse(kWeatherSchema)},
                           {"instances", nlohmann::json::array({call.arguments()})}});
        }
      }
    }
  }
  const size_t valid = CountValid(cases);
  EXPECT_GT(calls_of_model["qwen3"], 0u);
  EXPECT_GT(calls_of_model["llama3_2"], 0u);
  EXPECT_GT(malformed_free, 0u) << "without the grammar the biased trigger should also land outside calls";
  std::cout << "[ tools ] auto tool choice, biased trigger: " << replies << " replies, " << calls << " calls, "
            << valid << " valid; without the grammar " << malformed_free << " replies kept the trigger as content\n";
}

// Qwen3's template made to open the reasoning block in its generation prompt unless thinking is
// disabled (as thinking-only models do): a reply then starts inside reasoning.
std::string QwenTemplateOpeningThinking() {
  std::string chat_template = text::testing::LoadReferenceChat("qwen3").source.chat_template;
  const std::string closed = "{{- '<think>\\n\\n</think>\\n\\n' }}";
  const size_t at = chat_template.rfind(closed);
  if (at == std::string::npos) return "";
  chat_template.insert(at + closed.size(), "\n    {%- else %}\n        {{- '<think>\\n' }}");
  return chat_template;
}

// When the prompt leaves the reasoning block open, a tool choice's grammar starts inside its
// reasoning block: the reply reasons (unconstrained), closes the block in time, then calls. A
// forced choice gives valid calls after the reasoning. Under auto (the trigger biased) the reasoning
// may hold the trigger as text (it is never constrained, and a call there is no call); whatever
// calls the answer makes validate and its content holds no trigger.
TEST(ToolChatTest, ToolChoicesOnAPromptThatOpensReasoning) {
  const std::string chat_template = QwenTemplateOpeningThinking();
  ASSERT_FALSE(chat_template.empty());
  std::unique_ptr<Service> started = StartService("qwen3", chat_template);
  ASSERT_NE(started, nullptr);
  Service& service = *started;
  const std::string session = CreateSession(service, "sys", true);
  const int32_t trigger = SingleId(service, "<tool_call>");
  nlohmann::json cases = nlohmann::json::array();
  size_t replies_with_reasoning = 0;
  for (const v1::ToolChoice::Mode mode : {v1::ToolChoice::REQUIRED, v1::ToolChoice::AUTO}) {
    for (uint64_t seed = 1; seed <= niels::testing::UnlessSanitized<uint64_t>(6, 1); ++seed) {
      v1::Request request = MessagesRequest(session, {Message("user", "Weather in Oslo?")}, 64);
      request.mutable_chat()->clear_enable_thinking();  // the template opens the block
      request.mutable_chat()->set_keep_messages(0);
      request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
      request.mutable_chat()->mutable_sampling()->set_seed(seed);
      request.mutable_chat()->mutable_tool_choice()->set_mode(mode);
      if (mode == v1::ToolChoice::AUTO) {
        v1::TokenBias& bias = *request.mutable_chat()->mutable_sampling()->add_logit_bias();
        bias.set_id(trigger);
        bias.set_bias(12.0f);
      }
      const v1::Response response = Call(service, request);
      ASSERT_TRUE(response.has_chat()) << response.DebugString();
      const v1::ChatResponse& chat = response.chat();
      if (mode == v1::ToolChoice::REQUIRED) {
        EXPECT_EQ(chat.stop_reason(), v1::TOOL_CALLS) << "seed " << seed << ": reasoning [" << chat.reasoning()
                                                     << "] reply [" << chat.reply() << "]";
        EXPECT_GE(chat.tool_calls_size(), 1);
        replies_with_reasoning += chat.reasoning().empty() ? 0 : 1;
      }
      EXPECT_FALSE(HoldsTrigger("qwen3", chat.reply())) << chat.reply();
      // The block the prompt opened is not opened again (a grammar that began before it would
      // have had the reply write `<think>` once more).
      EXPECT_EQ(chat.reasoning().find("<think>"), std::string::npos) << chat.reasoning();
      EXPECT_EQ(chat.stop_reason() == v1::TOOL_CALLS, chat.tool_calls_size() > 0);
      for (const v1::ToolCall& call : chat.tool_calls()) {
        cases.push_back({{"schema", nlohmann::json::parse(kWeatherSchema)},
                         {"instances", nlohmann::json::array({call.arguments()})}});
      }
    }
  }
  EXPECT_GT(replies_with_reasoning, 0u);
  EXPECT_EQ(CountValid(cases), cases.size());
}

// Chat's per-step logprobs (want_logprobs, top_logprobs): one step per reply id, the same in the
// stream and the response; the text bytes of the steps make up the reply; greedy picks the best
// alternative; and the logprobs equal, bitwise, those Generate reports for the same prompt ids on a
// fresh session (the Chat path changes nothing of the numbers). Qwen3 and Llama 3.2 with their
// real templates, random weights.
TEST(ChatLogprobsTest, ChatStepsMatchTheReplyAndGenerate) {
  for (const std::string name : {"qwen3", "llama3_2"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Service> service = StartService(name);
    ASSERT_NE(service, nullptr);
    const std::string session = CreateSession(*service, "sys", false);
    v1::Request request = MessagesRequest(session, {Message("user", "Count to five.")}, 12);
    request.mutable_chat()->set_want_logprobs(true);
    request.mutable_chat()->set_top_logprobs(4);
    request.mutable_chat()->mutable_sampling()->set_temperature(0.0f);
    request.mutable_chat()->set_stream(true);
    std::shared_ptr<RecordingSink> sink = SubmitAsync(*service, request);
    const v1::Response response = sink->Wait();
    std::vector<v1::StepInfo> streamed;
    for (const v1::Response& event : sink->events()) {
      if (event.has_token() && event.token().has_step()) streamed.push_back(event.token().step());
    }
    ASSERT_TRUE(response.has_chat()) << response.DebugString();
    const v1::ChatResponse& chat = response.chat();
    ASSERT_EQ(chat.steps_size(), chat.reply_ids_size());
    ASSERT_EQ(streamed.size(), static_cast<size_t>(chat.steps_size()));
    std::string text;
    for (int i = 0; i < chat.steps_size(); ++i) {
      const v1::StepInfo& step = chat.steps(i);
      EXPECT_EQ(step.id(), chat.reply_ids(i));
      EXPECT_EQ(step.SerializeAsString(), streamed[i].SerializeAsString()) << i;
      EXPECT_LE(step.logprob(), 0.0f);
      ASSERT_EQ(step.top_size(), 4);
      EXPECT_EQ(step.top(0).id(), step.id()) << "greedy takes the best";
      EXPECT_EQ(step.top(0).logprob(), step.logprob());
      EXPECT_EQ(step.top(0).text_bytes(), step.text_bytes());
      for (int k = 1; k < step.top_size(); ++k) EXPECT_GE(step.top(k - 1).logprob(), step.top(k).logprob());
      text += step.text_bytes();
    }
    EXPECT_EQ(text, chat.reply()) << "thinking off: the reply's text is its ids' bytes";

    // The same prompt through Generate on a fresh session: the prompt is the session's tokens
    const v1::Response got = Call(*service, GetRequest(session));
    ASSERT_TRUE(got.has_get_session());
    const auto& tokens = got.get_session().token_ids();
    // before the reply (the session ends with the reply, then the template's end of turn).
    const std::vector<int32_t> history(tokens.begin(), tokens.end());
    const std::vector<int32_t> reply(chat.reply_ids().begin(), chat.reply_ids().end());
    const auto at = std::find_end(history.begin(), history.end(), reply.begin(), reply.end());
    ASSERT_NE(at, history.end());
    const int64_t prompt_length = at - history.begin();
    ASSERT_GT(prompt_length, 0);
    v1::Response fresh = Call(*service, CreateRequest(nullptr));
    ASSERT_TRUE(fresh.has_create_session());
    v1::Request generate = GenerateRequest(fresh.create_session().session_id(),
                                           std::vector<int32_t>(tokens.begin(), tokens.begin() + prompt_length),
                                           chat.reply_ids_size());
    generate.mutable_generate()->set_want_logprobs(true);
    generate.mutable_generate()->set_top_logprobs(4);
    generate.mutable_generate()->mutable_sampling()->set_temperature(0.0f);
    const v1::Response generated = Call(*service, generate);
    ASSERT_TRUE(generated.has_generate()) << generated.DebugString();
    ASSERT_GE(generated.generate().steps_size(), chat.steps_size());
    for (int i = 0; i < chat.steps_size(); ++i) {
      const v1::StepInfo& g = generated.generate().steps(i);
      EXPECT_EQ(g.id(), chat.steps(i).id()) << i;
      EXPECT_EQ(g.logprob(), chat.steps(i).logprob()) << i;
      for (int k = 0; k < g.top_size(); ++k) {
        EXPECT_EQ(g.top(k).id(), chat.steps(i).top(k).id());
        EXPECT_EQ(g.top(k).logprob(), chat.steps(i).top(k).logprob());
      }
    }

    // A reply that ends on the end-of-turn id at once: no step, streamed or in the response (the
    // end id is not part of the reply).
    v1::Request ending = MessagesRequest(session, {Message("user", "Stop.")}, 4);
    ending.mutable_chat()->set_keep_messages(0);
    ending.mutable_chat()->set_want_logprobs(true);
    ending.mutable_chat()->set_stream(true);
    v1::TokenBias& bias = *ending.mutable_chat()->mutable_sampling()->add_logit_bias();
    bias.set_id(SingleId(*service, name == "qwen3" ? "<|im_end|>" : "<|eot_id|>"));
    bias.set_bias(100.0f);
    std::shared_ptr<RecordingSink> ended = SubmitAsync(*service, ending);
    const v1::Response ended_response = ended->Wait();
    ASSERT_TRUE(ended_response.has_chat()) << ended_response.DebugString();
    EXPECT_EQ(ended_response.chat().stop_reason(), v1::EOT);
    EXPECT_EQ(ended_response.chat().steps_size(), 0);
    for (const v1::Response& event : ended->events()) EXPECT_FALSE(event.has_token() && event.token().has_step());
  }
  // top_logprobs past its limit is refused, naming it.
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  v1::Request request = MessagesRequest(CreateSession(*service, "sys", false), {Message("user", "hi")}, 2);
  request.mutable_chat()->set_top_logprobs(1001);
  const v1::Response refused = Call(*service, request);
  ASSERT_TRUE(refused.has_error());
  EXPECT_EQ(refused.error().code(), v1::INVALID_ARGUMENT);
  EXPECT_NE(refused.error().message().find("top_logprobs"), std::string::npos);
  EXPECT_NE(refused.error().message().find("(budget step_alternatives)"), std::string::npos);
  request.mutable_chat()->set_top_logprobs(1000);
  request.mutable_chat()->set_sampled_top_logprobs(1000);
  request.mutable_chat()->set_max_new_tokens(2098);  // 2000 x 2098 alternatives: past 2^22
  const v1::Response too_many = Call(*service, request);
  ASSERT_TRUE(too_many.has_error());
  EXPECT_EQ(too_many.error().code(), v1::RESOURCE_EXHAUSTED);
  EXPECT_NE(too_many.error().message().find("(budget step_alternative_entries)"), std::string::npos);
}

// The distribution each reply id was drawn from (StepInfo.sampled_top), on Chat: sampled at
// temperature 0.8 with top-k 5, every step lists at most 5 ids whose probabilities sum to 1, the
// drawn id among them with its sampled_logprob, each with its text_bytes; asking for it (and for
// 1000 raw alternatives) changes no id.
TEST(ChatLogprobsTest, SampledTopIsTheDistributionEachIdWasDrawnFrom) {
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  const auto run = [&](bool with_steps) {
    const std::string session = CreateSession(*service, "sys", false);
    v1::Request request = MessagesRequest(session, {Message("user", "Count to five.")}, 10);
    v1::Sampling& sampling = *request.mutable_chat()->mutable_sampling();
    sampling.set_temperature(0.8f);
    sampling.set_top_k(5);
    sampling.set_seed(11);
    if (with_steps) {
      request.mutable_chat()->set_sampled_top_logprobs(8);
      request.mutable_chat()->set_top_logprobs(1000);
    }
    const v1::Response response = Call(*service, request);
    EXPECT_TRUE(response.has_chat()) << response.DebugString();
    return response.chat();
  };
  const v1::ChatResponse plain = run(false);
  const v1::ChatResponse chat = run(true);
  EXPECT_EQ(std::vector<int32_t>(chat.reply_ids().begin(), chat.reply_ids().end()),
            std::vector<int32_t>(plain.reply_ids().begin(), plain.reply_ids().end()));
  ASSERT_EQ(chat.steps_size(), chat.reply_ids_size());
  ASSERT_GT(chat.steps_size(), 0);
  for (const v1::StepInfo& step : chat.steps()) {
    ASSERT_EQ(step.top_size(), 1000);
    ASSERT_GE(step.sampled_top_size(), 1);
    ASSERT_LE(step.sampled_top_size(), 5);
    double sum = 0.0;
    bool drawn = false;
    for (int k = 0; k < step.sampled_top_size(); ++k) {
      const v1::TokenAlternative& a = step.sampled_top(k);
      sum += std::exp(static_cast<double>(a.logprob()));
      if (k > 0) {
        EXPECT_GE(step.sampled_top(k - 1).logprob(), a.logprob());
      }
      // top-k keeps the 5 best raw ids: each sampled alternative is among the raw top 5.
      bool in_raw_top = false;
      for (int j = 0; j < 5; ++j) in_raw_top |= step.top(j).id() == a.id();
      EXPECT_TRUE(in_raw_top) << a.id();
      if (a.id() == step.id()) {
        drawn = true;
        EXPECT_EQ(a.logprob(), step.sampled_logprob());
        EXPECT_EQ(a.text_bytes(), step.text_bytes());
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
    EXPECT_TRUE(drawn) << "the drawn id " << step.id() << " is not in its distribution";
  }
}

// The compiled grammars of the tool sets in use are bounded per uid and in all: with limits of
// about one and a half sets per uid and two and a half in all, a uid's second set (a CreateSession
// or a Chat that sends tools) is refused with RESOURCE_EXHAUSTED naming `tools` and creates nothing,
// another uid is served, deleting a session frees its set's share, and past the limit in all even a
// fresh uid is refused.
TEST(ToolChatTest, ToolGrammarMemoryIsBoundedPerUserAndInAll) {
  // One set's grammars, compiled as the handlers compile them for Qwen3 (Hermes, with its tags).
  Prepared prepared;
  prepared.tools = std::make_shared<const std::vector<text::ToolDefinition>>(WeatherTools());
  ASSERT_TRUE(CompileToolGrammars(PrepareContext{tool_calls::ToolCallFamily::kHermes, text::ReasoningTags{"<think>", "</think>"}},
                                  {}, prepared).ok());
  ASSERT_NE(prepared.tool_grammars, nullptr);
  const uint64_t one_set = prepared.tool_grammars->memory_bytes();
  ASSERT_GT(one_set, 1000u);
  std::cout << "[ tools ] the grammars of a one-tool set hold " << one_set << " bytes\n";
  EngineOptions options;
  options.tool_grammar_bytes_per_uid = one_set * 3 / 2;
  options.tool_grammar_bytes = one_set * 5 / 2;
  std::unique_ptr<Service> started = StartService("qwen3", "", options);
  ASSERT_NE(started, nullptr);
  Service& service = *started;
  const auto sessions_of = [&service](uint32_t uid) {
    v1::Request list;
    list.mutable_list_sessions();
    return Call(service, list, uid).list_sessions().sessions_size();
  };
  const auto create = [&service](uint32_t uid) {
    v1::Request request = CreateRequest(nullptr);
    AddWeatherTool(*request.mutable_create_session()->mutable_tools());
    return Call(service, request, uid);
  };
  const auto expect_refused = [](const v1::Response& response, const char* what) {
    ASSERT_TRUE(response.has_error()) << what << ": " << response.DebugString();
    EXPECT_EQ(response.error().code(), v1::RESOURCE_EXHAUSTED) << what;
    EXPECT_TRUE(response.error().message().starts_with("tools: ")) << what << ": " << response.error().message();
  };
  const v1::Response first = create(kUid);
  ASSERT_TRUE(first.has_create_session()) << first.DebugString();
  expect_refused(create(kUid), "a second set of the same uid");
  EXPECT_EQ(sessions_of(kUid), 1);
  // A Chat that sends a new set is refused the same way, before its turn.
  v1::Request chat = MessagesRequest(first.create_session().session_id(), {Message("user", "hi")}, 2);
  AddWeatherTool(*chat.mutable_chat()->mutable_tools());
  expect_refused(Call(service, chat), "a Chat sending a second set");
  // Another uid is served; a third uid is then past the limit in all.
  EXPECT_TRUE(create(kUid + 1).has_create_session());
  expect_refused(create(kUid + 2), "past the limit in all");
  EXPECT_EQ(sessions_of(kUid + 2), 0);
  // Deleting the first session frees its share.
  v1::Request remove;
  remove.mutable_delete_session()->set_session_id(first.create_session().session_id());
  ASSERT_TRUE(Call(service, remove).has_delete_session());
  EXPECT_TRUE(create(kUid + 2).has_create_session());
  EXPECT_TRUE(create(kUid).has_error()) << "in all: two sets are kept again";
}

// A request's own constraint (a JSON Schema) on a reasoning model holds from the first byte after
// the reasoning block: the reasoning is free text (here forced by a bias on `<think>`, which the
// reasoning then repeats: it is text there), the
// daemon closes it in time, and the answer validates under python3-jsonschema -- with Qwen3's
// template (the reply may open the block) and with the variant whose prompt opens it (the reply
// starts inside it). Before the constraint was placed after the reasoning, a reply could not
// reason at all under a constraint (the first byte had to be JSON).
TEST(ReasoningConstraintTest, ASchemaConstrainsOnlyTheAnswerAfterTheReasoning) {
  const char* kSchema =
      R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"], "additionalProperties": false})";
  nlohmann::json cases = nlohmann::json::array();
  size_t replies = 0, reasoned = 0;
  for (const bool prompt_opens : {false, true}) {
    const std::string chat_template = prompt_opens ? QwenTemplateOpeningThinking() : std::string();
    ASSERT_TRUE(!prompt_opens || !chat_template.empty());
    std::unique_ptr<Service> started = StartService("qwen3", chat_template);
    ASSERT_NE(started, nullptr);
    Service& service = *started;
    const std::string session = CreateSession(service, "sys", false);
    const int32_t open = SingleId(service, "<think>");
    for (uint64_t seed = 1; seed <= niels::testing::UnlessSanitized<uint64_t>(8, 2); ++seed) {
      v1::Request request = MessagesRequest(session, {Message("user", "Plan a trip as JSON.")}, 64);
      request.mutable_chat()->clear_enable_thinking();
      request.mutable_chat()->set_keep_messages(0);
      request.mutable_chat()->mutable_constraint()->set_json_schema(kSchema);
      request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
      request.mutable_chat()->mutable_sampling()->set_seed(seed);
      if (!prompt_opens) {
        v1::TokenBias& bias = *request.mutable_chat()->mutable_sampling()->add_logit_bias();
        bias.set_id(open);
        bias.set_bias(seed % 2 == 0 ? 30.0f : 0.0f);  // every other reply made to open the block
      }
      const v1::Response response = Call(service, request);
      ASSERT_TRUE(response.has_chat()) << response.DebugString();
      const v1::ChatResponse& chat = response.chat();
      ++replies;
      reasoned += chat.reasoning().empty() ? 0 : 1;
      if (prompt_opens || seed % 2 == 0) {
        EXPECT_FALSE(chat.reasoning().empty()) << "seed " << seed << ": reply [" << chat.reply() << "]";
      }
      if (prompt_opens) {  // the block the prompt opened is not opened again
        EXPECT_EQ(chat.reasoning().find("<think>"), std::string::npos) << chat.reasoning();
      }
      EXPECT_NE(chat.stop_reason(), v1::CONSTRAINT_INCOMPLETE)
          << "seed " << seed << ": reasoning [" << chat.reasoning() << "] reply [" << chat.reply() << "]";
      cases.push_back({{"schema", nlohmann::json::parse(kSchema)}, {"instances", nlohmann::json::array({chat.reply()})}});
    }
  }
  EXPECT_EQ(CountValid(cases), cases.size());
  std::cout << "[ constraint ] schema after reasoning: " << replies << " replies, " << reasoned
            << " reasoned first, all answers valid\n";
}

// A prompt that closed the reasoning block itself (Qwen3 with enable_thinking false writes an empty
// `<think>\n\n</think>` after the assistant header): a constrained reply starts past that block and
// cannot open a second one, however hard a bias pushes `<think>` -- the request's schema and a
// forced tool call alike. Before, the constraint's optional reasoning block was still open to the
// reply, which then reasoned after the prompt had said it would not.
TEST(ReasoningConstraintTest, APromptThatClosedTheReasoningLeavesNoReasoningBlock) {
  const char* kSchema =
      R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"], "additionalProperties": false})";
  std::unique_ptr<Service> started = StartService("qwen3");
  ASSERT_NE(started, nullptr);
  Service& service = *started;
  v1::Request create = CreateRequest(nullptr);
  AddWeatherTool(*create.mutable_create_session()->mutable_tools());
  const v1::Response created = Call(service, create);
  ASSERT_TRUE(created.has_create_session()) << created.DebugString();
  const std::string session = created.create_session().session_id();
  const int32_t open = SingleId(service, "<think>");
  nlohmann::json cases = nlohmann::json::array();
  for (const bool forced_call : {false, true}) {
    for (uint64_t seed = 1; seed <= niels::testing::UnlessSanitized<uint64_t>(4, 2); ++seed) {
      v1::Request request = MessagesRequest(session, {Message("user", "Weather in Oslo?")}, 64);
      ASSERT_FALSE(request.chat().enable_thinking());  // the template closes the block in the prompt
      request.mutable_chat()->set_keep_messages(0);
      if (forced_call) {
        request.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::REQUIRED);
      } else {
        request.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::NONE);
        request.mutable_chat()->mutable_constraint()->set_json_schema(kSchema);
      }
      request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
      request.mutable_chat()->mutable_sampling()->set_seed(seed);
      v1::TokenBias& bias = *request.mutable_chat()->mutable_sampling()->add_logit_bias();
      bias.set_id(open);
      bias.set_bias(30.0f);
      const v1::Response response = Call(service, request);
      ASSERT_TRUE(response.has_chat()) << response.DebugString();
      const v1::ChatResponse& chat = response.chat();
      // (The bias still puts `<think>` inside the JSON strings: text there, as any other.)
      EXPECT_TRUE(chat.reasoning().empty()) << "seed " << seed << ": reasoning [" << chat.reasoning() << "]";
      const size_t first = chat.reply().find_first_not_of(" \t\r\n");
      EXPECT_NE(chat.reply().compare(first == std::string::npos ? 0 : first, 7, "<think>"), 0) << chat.reply();
      EXPECT_NE(chat.stop_reason(), v1::CONSTRAINT_INCOMPLETE) << chat.reply();
      if (forced_call) {
        EXPECT_EQ(chat.stop_reason(), v1::TOOL_CALLS) << chat.DebugString();
        ASSERT_GE(chat.tool_calls_size(), 1) << chat.DebugString();
        cases.push_back({{"schema", nlohmann::json::parse(kWeatherSchema)},
                         {"instances", nlohmann::json::array({chat.tool_calls(0).arguments()})}});
      } else {
        cases.push_back({{"schema", nlohmann::json::parse(kSchema)}, {"instances", nlohmann::json::array({chat.reply()})}});
      }
    }
  }
  EXPECT_EQ(CountValid(cases), cases.size());
}

// tool_choice required and named constrain the reply to calls (tool_grammar/tool_call_grammar.h):
// sampled at temperature 1.0 with as many seeds as it takes to emit 500 calls per forced mode (fewer
// under a sanitizer, where the masks over 151,936 ids dominate), on Qwen3 (Hermes), Llama 3.2
// (JSON) and Llama 3.1's template without tool support (the generic format) with random weights, every reply is TOOL_CALLS, every call names a tool of the session (the
// named one when named) and its arguments validate against that tool's schema under
// python3-jsonschema. A third of each mode's calls come from each model; named splits its third
// between the two tools.
TEST(ToolChatTest, ForcedToolChoicesAlwaysGiveValidCalls) {
  const char* kAddSchema =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "minimum": 0}}, )"
      R"("required": ["a", "b"], "additionalProperties": false})";
  const std::map<std::string, std::string> schemas = {{"get_weather", kWeatherSchema}, {"add", kAddSchema}};
  const size_t calls_per_mode = niels::testing::UnlessSanitized<size_t>(500, 8);
  constexpr uint64_t kMaxSeeds = 600;  // a bound on the loop; far more than the calls need
  nlohmann::json cases = nlohmann::json::array();
  std::map<std::string, size_t> calls_of_mode;
  size_t replies = 0;
  const std::vector<std::string> models = {"qwen3", "llama3_2", "llama3_1"};  // llama3_1: the generic format
  for (const std::string& model : models) {
    std::unique_ptr<Service> service = StartService(model);
    ASSERT_NE(service, nullptr) << model;
    v1::Request create = CreateRequest(nullptr);
    AddWeatherTool(*create.mutable_create_session()->mutable_tools());
    v1::Tool& add = *create.mutable_create_session()->mutable_tools()->add_tools();
    add.set_name("add");
    add.set_parameters(kAddSchema);
    const v1::Response created = Call(*service, create);
    ASSERT_TRUE(created.has_create_session()) << created.DebugString();
    const std::string session = created.create_session().session_id();
    for (const std::string& choice : std::vector<std::string>{"required", "add", "get_weather"}) {
      const std::string mode = choice == "required" ? "required" : "named";
      const size_t shares = models.size() * (mode == "required" ? 1 : 2);  // named: two tools per model
      const size_t wanted = (calls_per_mode + shares - 1) / shares;
      size_t made = 0;
      for (uint64_t seed = 1; made < wanted && seed <= kMaxSeeds; ++seed) {
        v1::Request request = MessagesRequest(session, {Message("user", "Weather in Oslo, and 2 + 3?")}, 64);
        request.mutable_chat()->set_keep_messages(0);
        request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
        request.mutable_chat()->mutable_sampling()->set_seed(seed);
        v1::ToolChoice& tool_choice = *request.mutable_chat()->mutable_tool_choice();
        tool_choice.set_mode(choice == "required" ? v1::ToolChoice::REQUIRED : v1::ToolChoice::NAMED);
        if (choice != "required") tool_choice.set_name(choice);
        const v1::Response response = Call(*service, request);
        ASSERT_TRUE(response.has_chat()) << model << " " << choice << ": " << response.DebugString();
        const v1::ChatResponse& chat = response.chat();
        ++replies;
        EXPECT_EQ(chat.stop_reason(), v1::TOOL_CALLS) << model << " " << choice << " seed " << seed << ": "
                                                       << chat.reply();
        ASSERT_GE(chat.tool_calls_size(), 1) << model << " " << choice << " seed " << seed << ": " << chat.reply();
        // enable_thinking is false: Qwen3's prompt closed the reasoning block, the reply has none.
        EXPECT_TRUE(chat.reasoning().empty()) << model << " " << choice << " seed " << seed << ": " << chat.reasoning();
        for (const v1::ToolCall& call : chat.tool_calls()) {
          ++made;
          ASSERT_EQ(schemas.count(call.name()), 1u) << call.name();
          if (choice != "required") {
            EXPECT_EQ(call.name(), choice);
          }
          EXPECT_EQ(call.id().rfind("call_", 0), 0u) << call.id();
          cases.push_back({{"schema", nlohmann::json::parse(schemas.at(call.name()))},
                           {"instances", nlohmann::json::array({call.arguments()})}});
        }
      }
      EXPECT_GE(made, wanted) << model << " " << choice;
      calls_of_mode[mode] += made;
    }
  }
  const size_t valid = CountValid(cases);
  EXPECT_GE(calls_of_mode["required"], calls_per_mode);
  EXPECT_GE(calls_of_mode["named"], calls_per_mode);
  std::cout << "[ tools ] forced tool choices: " << replies << " replies; calls: required " << calls_of_mode["required"]
            << ", named " << calls_of_mode["named"] << "; " << valid << " of " << cases.size() << " valid\n";
}

// The shipped niels_gpt model (models/niels-demo, context 256) with the generic tool format: under
// tool_choice required and named, sampled at temperature 1.0 with as many seeds as it takes to emit
// 500 calls per mode, every reply is TOOL_CALLS and every call's arguments validate against its
// tool's schema (python3-jsonschema). Its 1024-token vocabulary spells JSON at about 0.7 tokens a
// byte, so one tool with a small schema (some 85 tokens) is what its context holds beside the
// tool block and a reply: each of the two tools gets a session of its own.
TEST(ToolChatTest, ForcedToolChoicesOnTheShippedModelGiveValidCalls) {
  auto service = MakeService(std::filesystem::path(NIELS_SOURCE_DIR) / "models/niels-demo", EngineOptions{});
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  const std::map<std::string, std::string> schemas = {
      {"weather", R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]})"},
      {"add", R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})"}};
  const size_t calls_per_mode = niels::testing::UnlessSanitized<size_t>(500, 20);
  nlohmann::json cases = nlohmann::json::array();
  std::map<std::string, size_t> calls_of_mode;
  int64_t prompt_tokens = 0;
  for (const auto& [name, schema] : schemas) {
    v1::Request create = CreateRequest(nullptr);
    v1::Tool& tool = *create.mutable_create_session()->mutable_tools()->add_tools();
    tool.set_name(name);
    tool.set_parameters(schema);
    const v1::Response created = Call(**service, create);
    ASSERT_TRUE(created.has_create_session()) << created.DebugString();
    const std::string session = created.create_session().session_id();
    for (const std::string mode : {"required", "named"}) {
      const size_t wanted = (calls_per_mode + 1) / 2;  // half of each mode's calls from each tool
      size_t made = 0;
      for (uint64_t seed = 1; made < wanted && seed <= 4 * calls_per_mode; ++seed) {
        v1::Request request = ChatRequest(session, "hi", 64);
        request.mutable_chat()->set_keep_messages(0);
        request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
        request.mutable_chat()->mutable_sampling()->set_seed(seed);
        v1::ToolChoice& tool_choice = *request.mutable_chat()->mutable_tool_choice();
        tool_choice.set_mode(mode == "required" ? v1::ToolChoice::REQUIRED : v1::ToolChoice::NAMED);
        if (mode == "named") tool_choice.set_name(name);
        const v1::Response response = Call(**service, request);
        ASSERT_TRUE(response.has_chat()) << name << " " << mode << ": " << response.DebugString();
        const v1::ChatResponse& chat = response.chat();
        prompt_tokens = std::max(prompt_tokens, chat.stats().prompt_tokens());
        EXPECT_EQ(chat.stop_reason(), v1::TOOL_CALLS) << name << " " << mode << " seed " << seed << ": " << chat.reply();
        ASSERT_GE(chat.tool_calls_size(), 1) << name << " " << mode << " seed " << seed << ": " << chat.reply();
        for (const v1::ToolCall& call : chat.tool_calls()) {
          ++made;
          EXPECT_EQ(call.name(), name);
          cases.push_back({{"schema", nlohmann::json::parse(schema)},
                           {"instances", nlohmann::json::array({call.arguments()})}});
        }
      }
      EXPECT_GE(made, wanted) << name << " " << mode;
      calls_of_mode[mode] += made;
    }
  }
  const size_t valid = CountValid(cases);
  EXPECT_EQ(valid, cases.size());
  EXPECT_GE(calls_of_mode["required"], calls_per_mode);
  EXPECT_GE(calls_of_mode["named"], calls_per_mode);
  std::cout << "[ tools ] shipped model, generic format (prompt up to " << prompt_tokens
            << " of 256 tokens): calls required " << calls_of_mode["required"] << ", named " << calls_of_mode["named"]
            << "; " << valid << " of " << cases.size() << " valid\n";
}

// A tool result never outlives its call: on the shipped model (context 256) a result whose turn
// does not fit with its reply room does not leave out the exchange holding its call (it did, and
// the session kept a result without a call); the reply gets the room that is left.
TEST(ToolChatTest, AToolResultKeepsItsCallWhenTheContextIsShort) {
  auto service = MakeService(std::filesystem::path(NIELS_SOURCE_DIR) / "models/niels-demo", EngineOptions{});
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  v1::Request create = CreateRequest(nullptr);
  v1::Tool& tool = *create.mutable_create_session()->mutable_tools()->add_tools();
  tool.set_name("clock");
  tool.set_parameters(R"({"type": "object", "properties": {}})");
  const v1::Response created = Call(**service, create);
  ASSERT_TRUE(created.has_create_session()) << created.DebugString();
  const std::string session = created.create_session().session_id();
  v1::Request forced = ChatRequest(session, "time?", 48);
  forced.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::REQUIRED);
  const v1::Response called = Call(**service, forced);
  ASSERT_TRUE(called.has_chat()) << called.DebugString();
  ASSERT_EQ(called.chat().tool_calls_size(), 1) << called.chat().reply();
  v1::ChatMessage result = Message("tool", "noon");
  result.set_tool_call_id(called.chat().tool_calls(0).id());
  // The rendering (some 230 tokens) plus the reply room of 64 passes 256: the only earlier exchange
  // holds the call, so it stays and the reply gets the room that is left.
  const v1::Response answered = Call(**service, MessagesRequest(session, {result}, 64));
  ASSERT_TRUE(answered.has_chat()) << answered.DebugString();
  EXPECT_EQ(answered.chat().truncated_turns(), 0);
  std::vector<std::string> roles;
  const v1::Response got = Call(**service, GetRequest(session));
  for (const v1::ChatMessage& message : got.get_session().messages()) roles.push_back(message.role());
  EXPECT_EQ(roles, (std::vector<std::string>{"user", "assistant", "tool", "assistant"}));
}

// Banned end-of-turn ids: a forced choice is refused up front (its calls could never end; it used to
// reach the engine and come back INTERNAL), and auto yields, so the reply runs to its budget as an
// unconstrained one does.
TEST(ToolChatTest, BannedEndOfTurnIdsWithToolChoices) {
  std::unique_ptr<Service> service = StartService("qwen3");
  ASSERT_NE(service, nullptr);
  const std::string session = CreateSession(*service, "sys", true);
  const Conversation before = Read(*service, session);
  v1::Request forced = MessagesRequest(session, {Message("user", "Weather in Oslo?")}, 12);
  for (const char* end : {"<|im_end|>", "<|endoftext|>"}) {
    forced.mutable_chat()->mutable_sampling()->add_banned_ids(SingleId(*service, end));
  }
  for (v1::ToolChoice::Mode mode : {v1::ToolChoice::REQUIRED, v1::ToolChoice::NAMED}) {
    forced.mutable_chat()->mutable_tool_choice()->set_mode(mode);
    if (mode == v1::ToolChoice::NAMED) forced.mutable_chat()->mutable_tool_choice()->set_name("get_weather");
    const v1::Response refused = Call(*service, forced);
    ASSERT_TRUE(refused.has_error()) << refused.DebugString();
    EXPECT_EQ(refused.error().code(), v1::INVALID_ARGUMENT) << refused.DebugString();
    EXPECT_NE(refused.error().message().find("sampling.banned_ids"), std::string::npos) << refused.error().message();
    EXPECT_EQ(Read(*service, session).tokens, before.tokens);
  }
  // One end id left unbanned: the forced reply is constrained again and makes its call.
  v1::Request one_left = forced;
  one_left.mutable_chat()->mutable_sampling()->clear_banned_ids();
  one_left.mutable_chat()->mutable_sampling()->add_banned_ids(SingleId(*service, "<|endoftext|>"));
  one_left.mutable_chat()->set_max_new_tokens(64);
  const v1::Response called = Call(*service, one_left);
  ASSERT_TRUE(called.has_chat()) << called.DebugString();
  EXPECT_EQ(called.chat().stop_reason(), v1::TOOL_CALLS) << called.DebugString();
  ASSERT_TRUE(Call(*service, [&] {
                v1::Request rewind;
                rewind.mutable_rewind_session()->set_session_id(session);
                rewind.mutable_rewind_session()->set_keep_messages(0);
                return rewind;
              }()).has_rewind_session());

  v1::Request automatic = forced;
  automatic.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::AUTO);
  automatic.mutable_chat()->mutable_tool_choice()->clear_name();
  const v1::Response answered = Call(*service, automatic);
  ASSERT_TRUE(answered.has_chat()) << answered.DebugString();
  EXPECT_EQ(answered.chat().stop_reason(), v1::MAX_TOKENS) << answered.DebugString();
  EXPECT_EQ(answered.chat().stats().generated_tokens(), 12) << answered.DebugString();
}

}  // namespace tool_chat_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
