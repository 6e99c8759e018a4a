// Chat through the Service with a model's Jinja chat template (random weights of a small Qwen3 shape
// with the real tokenizer: tests/support/reference_chat_model.h): Info names the format, a streamed
// reply's reasoning and answer come apart in the events and the response, enable_thinking reaches
// the template, and a model without any chat format refuses Chat but serves Generate.
#include <algorithm>
#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/text/jinja_chat_format.h"
#include "tests/daemon/handlers/service_fixture.h"
#include "tests/support/reference_chat_model.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace template_chat_test {  // this file's own names: the suite compiles as one unity unit

constexpr uint64_t kSeed = 5;

std::unique_ptr<Service> StartTemplateService(const std::string& chat_template = "",
                                              bool no_chat_format = false) {
  std::unique_ptr<loaders::Model> model = niels::testing::ReferenceChatModel("qwen3", kSeed, chat_template);
  if (model == nullptr) return nullptr;
  if (no_chat_format) model->chat_template.clear();
  EngineOptions options;
  options.threads = 1;
  return std::make_unique<Service>(std::make_unique<engine::Engine>(std::move(model), options));
}

v1::InfoResponse Info(Service& service) {
  v1::Response response = Call(service, [] { v1::Request r; r.mutable_info(); return r; }());
  EXPECT_TRUE(response.has_info()) << response.DebugString();
  return response.info();
}

std::string CreateSession(Service& service, const std::string* system = nullptr) {
  v1::Response response = Call(service, CreateRequest(system));
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

TEST(TemplateChatTest, InfoNamesTheTemplateItsStopIdsAndReasoning) {
  std::unique_ptr<Service> service = StartTemplateService();
  ASSERT_NE(service, nullptr);
  const v1::InfoResponse info = Info(*service);
  EXPECT_EQ(info.chat_format(), "jinja");
  EXPECT_EQ(info.chat_format_error(), "");
  EXPECT_TRUE(info.reasoning());
  auto tokenizer = text::testing::LoadReferenceChat("qwen3").tokenizer;
  ASSERT_NE(tokenizer, nullptr);
  const int32_t im_end = text::testing::SpecialId(*tokenizer, "<|im_end|>");
  EXPECT_NE(std::find(info.chat_stop_ids().begin(), info.chat_stop_ids().end(), im_end), info.chat_stop_ids().end());
}

// Info describes the model: its architecture and grouped-query shape, and what one position of KV
// costs (K and V of every layer, kv_heads x head_size each, in the KV dtype).
TEST(TemplateChatTest, InfoDescribesTheModel) {
  std::unique_ptr<Service> service = StartTemplateService();
  ASSERT_NE(service, nullptr);
  const std::unique_ptr<loaders::Model> model = niels::testing::ReferenceChatModel("qwen3", kSeed, "");
  ASSERT_NE(model, nullptr);
  const model::ModelConfig& config = model->config;
  const v1::InfoResponse info = Info(*service);
  EXPECT_EQ(info.architecture(), "qwen3");
  EXPECT_EQ(info.kv_heads(), config.kv_heads);
  EXPECT_EQ(info.head_size(), config.head_size);
  ASSERT_LT(config.kv_heads, config.heads);  // the shape is grouped-query, so kv_heads is not heads
  EXPECT_EQ(info.kv_dtype(), "f32");
  EXPECT_EQ(info.kv_bytes_per_token(), static_cast<uint64_t>(2 * config.layers * config.kv_heads * config.head_size * 4));
  EXPECT_EQ(info.context(), config.context);
  EXPECT_GE(info.model_context(), info.context());
}

// A template whose generation prompt opens the think block (as DeepSeek R1's does): the reply
// reasons from its first token; the streamed deltas add up to the response's two parts, which are
// the reply's text as the splitter cuts it.
TEST(TemplateChatTest, StreamedReasoningAndAnswerAddUpToTheResponse) {
  const std::string chat_template =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
  std::unique_ptr<Service> service = StartTemplateService(chat_template);
  ASSERT_NE(service, nullptr);
  const std::string session = CreateSession(*service);
  auto sink = SubmitAsync(*service, ChatRequest(session, "Why is the sky blue?", 12, true, /*stream=*/true));
  const v1::Response response = sink->Wait();
  ASSERT_TRUE(response.has_chat()) << response.DebugString();
  const v1::ChatResponse& chat = response.chat();
  std::string answer, reasoning;
  for (const v1::Response& event : sink->events()) {
    answer += event.token().text();
    reasoning += event.token().reasoning();
  }
  EXPECT_EQ(answer, chat.reply());
  EXPECT_EQ(reasoning, chat.reasoning());
  EXPECT_FALSE(chat.reasoning().empty());
  auto tokenizer = text::testing::LoadReferenceChat("qwen3").tokenizer;
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> ids(chat.reply_ids().begin(), chat.reply_ids().end());
  const text::ReplyDelta split = text::ReplySplitter::Split(tokenizer->Decode(ids), text::ReasoningTags{}, true);
  EXPECT_EQ(chat.reasoning(), split.reasoning);
  EXPECT_EQ(chat.reply(), split.answer);

  // The second turn reuses the first turn's prompt from the cache.
  const v1::Response second = Call(*service, ChatRequest(session, "And at sunset?", 4));
  ASSERT_TRUE(second.has_chat()) << second.DebugString();
  EXPECT_GT(second.chat().stats().reused_tokens(), 0);
  const v1::Response got = Call(*service, GetRequest(session));
  EXPECT_EQ(got.get_session().session().turns(), 2);
}

TEST(TemplateChatTest, EnableThinkingReachesTheTemplate) {
  std::unique_ptr<Service> service = StartTemplateService();
  ASSERT_NE(service, nullptr);
  text::testing::ReferenceChat chat = text::testing::LoadReferenceChat("qwen3");
  ASSERT_NE(chat.tokenizer, nullptr);
  auto format = text::JinjaChatFormat::Create(chat.source);
  ASSERT_TRUE(format.ok()) << format.status().ToString();
  const std::string system = "be brief";
  for (const std::optional<bool> thinking : {std::optional<bool>(), std::optional<bool>(false)}) {
    const std::string session = CreateSession(*service, &system);
    v1::Request request = ChatRequest(session, "hello", 2);
    if (thinking) request.mutable_chat()->set_enable_thinking(*thinking);
    const v1::Response response = Call(*service, request);
    ASSERT_TRUE(response.has_chat()) << response.DebugString();
    text::ChatOptions options;
    options.enable_thinking = thinking;
    auto prompt = (*format)->EncodeTurn(system, {}, "hello", options);
    ASSERT_TRUE(prompt.ok());
    EXPECT_EQ(response.chat().stats().prompt_tokens(), static_cast<int64_t>(prompt->ids.size()))
        << "enable_thinking " << thinking.value_or(true);
  }
}

TEST(TemplateChatTest, ModelWithoutAChatFormatRefusesChatButGenerates) {
  std::unique_ptr<Service> service = StartTemplateService("", /*no_chat_format=*/true);
  ASSERT_NE(service, nullptr);
  const v1::InfoResponse info = Info(*service);
  EXPECT_EQ(info.chat_format(), "");
  EXPECT_NE(info.chat_format_error().find("Generate"), std::string::npos) << info.chat_format_error();
  const std::string system = "be brief";
  EXPECT_EQ(ErrorOf(Call(*service, CreateRequest(&system))), v1::INVALID_ARGUMENT);
  const std::string session = CreateSession(*service);
  EXPECT_EQ(ErrorOf(Call(*service, ChatRequest(session, "hi", 2))), v1::INVALID_ARGUMENT);
  const v1::Response generated = Call(*service, GenerateRequest(session, {9707, 1879}, 3));
  ASSERT_TRUE(generated.has_generate()) << generated.DebugString();
  EXPECT_GE(generated.generate().new_ids_size(), 1);
}

std::unique_ptr<Service> StartFamilyService(const std::string& name, bool no_chat_format = false) {
  std::unique_ptr<loaders::Model> model = niels::testing::ReferenceChatModel(name, kSeed);
  if (model == nullptr) return nullptr;
  if (no_chat_format) model->chat_template.clear();
  EngineOptions options;
  options.threads = 1;
  return std::make_unique<Service>(std::make_unique<engine::Engine>(std::move(model), options));
}

// A session holds what its caller put there: a fresh session of a template model is empty, and
// Generate on it conditions on its input ids alone, exactly as on the same model served without a
// chat format (whose sessions always started empty). A system prompt is still the session's start.
TEST(TemplateChatTest, AFreshSessionIsEmptyAndGenerateSeesOnlyItsIds) {
  for (const char* name : {"qwen3", "llama3_2"}) {
    std::unique_ptr<Service> templated = StartFamilyService(name);
    std::unique_ptr<Service> bare = StartFamilyService(name, /*no_chat_format=*/true);
    ASSERT_NE(templated, nullptr);
    ASSERT_NE(bare, nullptr);
    const v1::Response created = Call(*templated, CreateRequest());
    ASSERT_TRUE(created.has_create_session()) << created.DebugString();
    EXPECT_EQ(created.create_session().length(), 0) << name;
    const std::string session = created.create_session().session_id();
    EXPECT_EQ(Call(*templated, GetRequest(session)).get_session().session().length(), 0) << name;
    const std::vector<int32_t> ids = {9707, 1879, 315, 279};
    const v1::Response generated = Call(*templated, GenerateRequest(session, ids, 6));
    const v1::Response reference = Call(*bare, GenerateRequest(CreateSession(*bare), ids, 6));
    ASSERT_TRUE(generated.has_generate() && reference.has_generate()) << generated.DebugString();
    EXPECT_EQ(generated.generate().stats().prompt_tokens(), static_cast<int64_t>(ids.size())) << name;
    const std::vector<int32_t> got(generated.generate().new_ids().begin(), generated.generate().new_ids().end());
    const std::vector<int32_t> want(reference.generate().new_ids().begin(), reference.generate().new_ids().end());
    EXPECT_EQ(got, want) << name;

    // With a system prompt the session starts with the template's rendering up to the first user
    // message, and a Chat turn on a fresh session renders the whole start itself.
    text::testing::ReferenceChat chat = text::testing::LoadReferenceChat(name);
    ASSERT_NE(chat.tokenizer, nullptr);
    auto format = text::JinjaChatFormat::Create(chat.source);
    ASSERT_TRUE(format.ok()) << format.status().ToString();
    const std::string system = "be brief";
    const v1::Response with_system = Call(*templated, CreateRequest(&system));
    ASSERT_TRUE(with_system.has_create_session());
    EXPECT_EQ(with_system.create_session().length(),
              static_cast<int64_t>((*format)->SessionStart(system).value().size())) << name;
    const std::string fresh = CreateSession(*templated);
    const v1::Response replied = Call(*templated, ChatRequest(fresh, "hello", 2));
    ASSERT_TRUE(replied.has_chat()) << replied.DebugString();
    auto prompt = (*format)->EncodeTurn(std::nullopt, {}, "hello", {});
    ASSERT_TRUE(prompt.ok());
    // Llama 3.2 writes today's date: the day may turn between the two renderings, not their length.
    EXPECT_EQ(replied.chat().stats().prompt_tokens(), static_cast<int64_t>(prompt->ids.size())) << name;
  }
}

// Info states the BOS and whether the tokenizer adds it; Tokenize adds it with add_special (only
// when the tokenizer adds one) and reads special literals only with parse_special.
TEST(TemplateChatTest, InfoStatesTheBosAndTokenizeAddsAndParsesOnRequest) {
  struct Expected {
    const char* name;
    const char* special;
    bool add_bos;
  };
  for (const Expected& e : {Expected{"qwen3", "<|im_start|>", false}, Expected{"llama3_2", "<|eot_id|>", true}}) {
    std::unique_ptr<Service> service = StartFamilyService(e.name);
    ASSERT_NE(service, nullptr);
    auto tokenizer = text::testing::LoadReferenceChat(e.name).tokenizer;
    ASSERT_NE(tokenizer, nullptr);
    const v1::InfoResponse info = Info(*service);
    EXPECT_EQ(info.add_bos(), e.add_bos) << e.name;
    if (e.add_bos) {
      EXPECT_EQ(info.bos_id(), text::testing::SpecialId(*tokenizer, "<|begin_of_text|>"));
    }
    const int32_t special = text::testing::SpecialId(*tokenizer, e.special);
    auto tokenize = [&](bool add_special, bool parse_special) {
      v1::Request request;
      request.mutable_tokenize()->set_text(std::string("hi") + e.special);
      request.mutable_tokenize()->set_add_special(add_special);
      request.mutable_tokenize()->set_parse_special(parse_special);
      const v1::Response response = Call(*service, request);
      EXPECT_TRUE(response.has_tokenize()) << response.DebugString();
      return std::vector<int32_t>(response.tokenize().ids().begin(), response.tokenize().ids().end());
    };
    const std::vector<int32_t> plain = tokenize(false, false);
    EXPECT_EQ(plain, tokenizer->Encode(std::string("hi") + e.special, false).value()) << e.name;
    EXPECT_EQ(std::count(plain.begin(), plain.end(), special), 0) << e.name;
    const std::vector<int32_t> parsed = tokenize(false, true);
    ASSERT_FALSE(parsed.empty());
    EXPECT_EQ(parsed.back(), special) << e.name;
    std::vector<int32_t> with_bos = plain;
    if (e.add_bos) with_bos.insert(with_bos.begin(), info.bos_id());
    EXPECT_EQ(tokenize(true, false), with_bos) << e.name;
  }
}

// A stop string on a template model: the reply (the assistant message the session stores) is the
// text before the match, the streamed deltas join to it, and the next turn renders that message and
// reuses the cache up to where the rendering differs.
TEST(TemplateChatTest, AStopStringEndsTheReplyAndTheNextTurnRendersWhatWasKept) {
  std::unique_ptr<Service> service = StartTemplateService();
  ASSERT_NE(service, nullptr);
  auto request_for = [](const std::string& session, bool stream) {
    v1::Request request = ChatRequest(session, "tell me about kittens", 40, /*use_kv_cache=*/true, stream);
    request.mutable_chat()->set_enable_thinking(false);
    request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
    request.mutable_chat()->mutable_sampling()->set_seed(21);
    return request;
  };
  const v1::Response full = Call(*service, request_for(CreateSession(*service), false));
  ASSERT_TRUE(full.has_chat()) << full.DebugString();
  const std::string reply = full.chat().reply();
  // An ASCII letter pair first occurring past a third of the reply.
  std::string stop;
  size_t at = std::string::npos;
  for (size_t i = reply.size() / 3; i + 2 <= reply.size() && at == std::string::npos; ++i) {
    const std::string pair = reply.substr(i, 2);
    if (std::isalpha(static_cast<unsigned char>(pair[0])) && std::isalpha(static_cast<unsigned char>(pair[1])) &&
        reply.find(pair) == i) {
      stop = pair;
      at = i;
    }
  }
  ASSERT_NE(at, std::string::npos) << "no ASCII letter pair in the sampled reply: " << reply;

  const std::string session = CreateSession(*service);
  v1::Request request = request_for(session, true);
  request.mutable_chat()->add_stop_strings(stop);
  auto sink = SubmitAsync(*service, request);
  const v1::Response stopped = sink->Wait();
  ASSERT_TRUE(stopped.has_chat()) << stopped.DebugString();
  EXPECT_EQ(stopped.chat().stop_reason(), v1::STOP_STRING);
  EXPECT_EQ(stopped.chat().reply(), reply.substr(0, at));
  std::string streamed;
  for (const v1::Response& event : sink->events()) streamed += event.token().text();
  EXPECT_EQ(streamed, stopped.chat().reply());

  const v1::Response next = Call(*service, ChatRequest(session, "and then?", 2));
  ASSERT_TRUE(next.has_chat()) << next.DebugString();
  EXPECT_GT(next.chat().stats().reused_tokens(), 0);
  // The next turn's prompt is the whole history (the kept reply rendered as a message) and more.
  EXPECT_GT(next.chat().stats().prompt_tokens(), stopped.chat().session_length());
}

// A template session's conversation read back: the system prompt, then the exchanges as stored
// (the reply's reasoning apart from its answer).
TEST(TemplateChatTest, GetSessionReadsTheConversationBackAsMessages) {
  std::unique_ptr<Service> service = StartTemplateService();
  ASSERT_NE(service, nullptr);
  const std::string system = "be brief";
  const std::string session = CreateSession(*service, &system);
  const v1::Response first = Call(*service, ChatRequest(session, "hello", 6));
  ASSERT_TRUE(first.has_chat()) << first.DebugString();
  const v1::Response second = Call(*service, ChatRequest(session, "and then?", 6));
  ASSERT_TRUE(second.has_chat()) << second.DebugString();
  const v1::Response got = Call(*service, GetRequest(session));
  ASSERT_TRUE(got.has_get_session()) << got.DebugString();
  const auto& messages = got.get_session().messages();
  ASSERT_EQ(messages.size(), 5);
  EXPECT_EQ(messages[0].role(), "system");
  EXPECT_EQ(messages[0].content(), system);
  EXPECT_EQ(messages[1].content(), "hello");
  EXPECT_EQ(messages[2].role(), "assistant");
  EXPECT_EQ(messages[2].content(), first.chat().reply());
  EXPECT_EQ(messages[2].reasoning(), first.chat().reasoning());
  EXPECT_EQ(messages[3].content(), "and then?");
  EXPECT_EQ(messages[4].content(), second.chat().reply());
}

// RewindSession on a template session: the conversation keeps its first exchange, and the next turn
// renders from there, reusing the cache of what was kept, and regenerates the dropped turn's reply.
TEST(TemplateChatTest, RewindKeepsTheFirstExchangesAndTheNextTurnRegenerates) {
  std::unique_ptr<Service> service = StartTemplateService();
  ASSERT_NE(service, nullptr);
  const std::string system = "be brief";
  const std::string session = CreateSession(*service, &system);
  ASSERT_TRUE(Call(*service, ChatRequest(session, "hello", 4)).has_chat());
  const v1::Response second = Call(*service, ChatRequest(session, "and then?", 4));
  ASSERT_TRUE(second.has_chat()) << second.DebugString();
  ASSERT_TRUE(Call(*service, ChatRequest(session, "one more", 4)).has_chat());

  v1::Request rewind;
  rewind.mutable_rewind_session()->set_session_id(session);
  rewind.mutable_rewind_session()->set_keep_messages(2);
  const v1::Response rewound = Call(*service, rewind);
  ASSERT_TRUE(rewound.has_rewind_session()) << rewound.DebugString();
  const v1::Response got = Call(*service, GetRequest(session));
  ASSERT_EQ(got.get_session().messages_size(), 3);  // system, hello, its reply
  EXPECT_EQ(got.get_session().messages(1).content(), "hello");
  EXPECT_EQ(got.get_session().token_ids_size(), rewound.rewind_session().length());

  const v1::Response again = Call(*service, ChatRequest(session, "and then?", 4));
  ASSERT_TRUE(again.has_chat()) << again.DebugString();
  EXPECT_EQ(again.chat().reply(), second.chat().reply());  // greedy: the same reply as before
  // The kept history at least; the whole blocks the first "and then?" turn registered for the
  // same rendering are taken too.
  EXPECT_GE(again.chat().stats().reused_tokens(), rewound.rewind_session().length());
  EXPECT_EQ(again.chat().stats().reused_tokens(),
            std::max(rewound.rewind_session().length(), (again.chat().stats().prompt_tokens() - 1) / 16 * 16));
  EXPECT_LT(again.chat().stats().prefilled_tokens(), again.chat().stats().prompt_tokens() / 2);
}

}  // namespace template_chat_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
