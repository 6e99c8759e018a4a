// The HTTP front on loopback TCP (nielsd --http-listen ADDR --api-keys FILE) end to end: a real
// nielsd bound to 127.0.0.1 port 0 (the port it logs), API keys of two principals in a 0600 file,
// raw requests over real TCP sockets and the official `openai` npm client with its key. Keys are
// checked (401 in each API's error shape), a web page's requests are refused (403 for a foreign
// Host or any Origin unless allowed), principals are identities of their own (their prefix cache,
// session quota and connection limit apart from each other and from the local uid), and what the
// listener must not take (a non-loopback address, no key file, a readable key file) stops nielsd
// at start with a clear message.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace http_tcp_test {

using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kBound{15000};
constexpr const char* kAliceKey = "alice-0123456789-abcdefghij";
constexpr const char* kBobKey = "bob-0123456789-abcdefghijkl";

// A raw client of a loopback TCP port (127.0.0.1, or ::1 with `ipv6`).
class TcpClient {
 public:
  explicit TcpClient(uint16_t port, bool ipv6 = false) {
    fd_ = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sockaddr_in6 address6{};
    address6.sin6_family = AF_INET6;
    address6.sin6_port = htons(port);
    address6.sin6_addr = in6addr_loopback;
    const int connected =
        ipv6 ? ::connect(fd_, reinterpret_cast<sockaddr*>(&address6), sizeof(address6))
             : ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    if (fd_ < 0 || connected != 0) {
      throw std::runtime_error("cannot connect to loopback port " + std::to_string(port) + ": " +
                               std::strerror(errno));
    }
  }
  ~TcpClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  TcpClient(const TcpClient&) = delete;
  TcpClient& operator=(const TcpClient&) = delete;

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // One response with a Content-Length body; with `closed`, whether the server then closed.
  std::string ReadResponse(milliseconds timeout, bool* closed = nullptr) {
    std::string bytes;
    const Clock::time_point deadline = Clock::now() + timeout;
    char buffer[65536];
    while (Clock::now() < deadline) {
      const size_t head_end = bytes.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const size_t at = bytes.find("Content-Length: ");
        if (at != std::string::npos && at < head_end) {
          const size_t length = std::stoul(bytes.substr(at + 16));
          if (bytes.size() >= head_end + 4 + length) {
            if (closed != nullptr) *closed = WaitClosed(deadline);
            return bytes.substr(0, head_end + 4 + length);
          }
        }
      }
      pollfd poller{fd_, POLLIN, 0};
      if (::poll(&poller, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      bytes.append(buffer, static_cast<size_t>(n));
    }
    if (closed != nullptr) *closed = true;
    return bytes;
  }

 private:
  bool WaitClosed(Clock::time_point deadline) {
    char buffer[4096];
    while (Clock::now() < deadline) {
      pollfd poller{fd_, POLLIN, 0};
      if (::poll(&poller, 1, 100) <= 0) continue;
      if (::recv(fd_, buffer, sizeof(buffer), 0) <= 0) return true;
    }
    return false;
  }

  int fd_ = -1;
};

int StatusOf(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

json BodyOf(const std::string& response) {
  const size_t head_end = response.find("\r\n\r\n");
  return json::parse(head_end == std::string::npos ? "" : response.substr(head_end + 4), nullptr, false);
}

struct Headers {
  std::string host = "127.0.0.1";
  std::optional<std::string> authorization;
  std::optional<std::string> x_api_key;
  std::optional<std::string> origin;
  bool keep_alive = false;
  std::vector<std::pair<std::string, std::string>> extra;  // more headers, as given
};

std::string Request(const std::string& method, const std::string& path, const std::string& body,
                    const Headers& headers) {
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + headers.host + "\r\n";
  if (headers.authorization) request += "Authorization: " + *headers.authorization + "\r\n";
  if (headers.x_api_key) request += "x-api-key: " + *headers.x_api_key + "\r\n";
  if (headers.origin) request += "Origin: " + *headers.origin + "\r\n";
  for (const auto& [name, value] : headers.extra) request += name + ": " + value + "\r\n";
  if (!headers.keep_alive) request += "Connection: close\r\n";
  if (method == "POST") {
    request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return request + "\r\n" + body;
}

Headers WithKey(const std::string& key) {
  Headers headers;
  headers.authorization = "Bearer " + key;
  return headers;
}

class HttpTcpTest : public IntegrationTest {
 protected:
  std::filesystem::path keys_file() const { return dir_.path() / "api_keys"; }
  std::filesystem::path http_socket() const { return dir_.path() / "http.sock"; }

  void WriteKeys(mode_t mode) {
    std::ofstream(keys_file()) << "# two principals\n" << kAliceKey << " alice\n\n" << kBobKey << " bob\n";
    ASSERT_EQ(::chmod(keys_file().c_str(), mode), 0);
  }

  // nielsd with the TCP listener on an ephemeral port of `address` (and the Unix HTTP socket
  // beside it); the port it logged.
  void StartTcpDaemon(std::vector<std::string> extra = {}, const std::string& address = "127.0.0.1") {
    WriteKeys(0600);
    testing::DaemonProcessOptions options = DaemonOptions();
    const std::string listen = (address == "::1" ? "[::1]" : address) + ":0";
    if (!durable_) options.extra_args.push_back("--ephemeral");
    options.extra_args.insert(options.extra_args.end(), {"--http-listen", listen, "--api-keys", keys_file().string(),
                                                         "--http-socket", http_socket().string()});
    options.extra_args.insert(options.extra_args.end(), extra.begin(), extra.end());
    daemon_ = testing::DaemonProcess::Start(options);
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
    auto info = client_->Info();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    info_ = *info;
    model_id_ = info_.model_name().empty() ? "nielsd" : info_.model_name();
    const std::regex logged(address == "::1" ? R"(HTTP on \[::1\]:(\d+) \(loopback TCP)"
                                             : R"(HTTP on 127\.0\.0\.1:(\d+) \(loopback TCP)");
    // The match refers into `log`, which outlives it.
    std::string log;
    std::smatch match;
    for (const Clock::time_point deadline = Clock::now() + kBound; Clock::now() < deadline;) {
      log = daemon_->log();
      if (std::regex_search(log, match, logged)) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
    ASSERT_FALSE(match.empty()) << "no bound port in the log:\n" << daemon_->log();
    port_ = static_cast<uint16_t>(std::stoi(match[1].str()));
    ASSERT_NE(port_, 0);
  }

  // One request on a fresh connection; the whole response.
  std::string Exchange(const std::string& method, const std::string& path, const std::string& body,
                       const Headers& headers) {
    TcpClient connection(port_);
    connection.Send(Request(method, path, body, headers));
    return connection.ReadResponse(kBound);
  }

  json Chat(const std::string& content, int max_tokens = 6) const {
    return {{"model", model_id_},
            {"messages", {{{"role", "user"}, {"content", content}}}},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  }

  json Message(const std::string& content) const {
    return {{"model", model_id_}, {"max_tokens", 6}, {"messages", {{{"role", "user"}, {"content", content}}}}};
  }

  // nielsd run to its exit with `args` (it must not start); its exit code and log.
  std::pair<int, std::string> RunRefused(std::vector<std::string> args) {
    testing::DaemonProcessOptions options = DaemonOptions();
    options.extra_args.insert(options.extra_args.end(), {"--ephemeral"});
    options.extra_args.insert(options.extra_args.end(), args.begin(), args.end());
    options.wait_until_listening = false;
    std::unique_ptr<testing::DaemonProcess> process = testing::DaemonProcess::Start(options);
    const std::optional<int> code = process->Wait(kBound);
    EXPECT_TRUE(code.has_value()) << "nielsd did not exit:\n" << process->log();
    return {code.value_or(-1), process->log()};
  }

  // One request on the Unix HTTP socket (curl, as the local uid) with `headers` ("Name: value");
  // its status and body.
  std::pair<int, json> PostOnSocket(const std::string& path, const json& body,
                                    const std::vector<std::string>& headers = {}) {
    std::vector<std::string> argv = {"curl", "-sS", "--unix-socket", http_socket().string(), "-H",
                                     "Content-Type: application/json", "-w", "\n%{http_code}"};
    for (const std::string& header : headers) argv.insert(argv.end(), {"-H", header});
    argv.insert(argv.end(), {"-d", body.dump(), "http://localhost" + path});
    testing::ProcessResult curl = testing::RunProcess(argv);
    EXPECT_EQ(curl.exit_code, 0) << curl.err;
    const size_t newline = curl.out.rfind('\n');
    if (newline == std::string::npos) return {0, nullptr};
    return {std::stoi(curl.out.substr(newline + 1)), json::parse(curl.out.substr(0, newline), nullptr, false)};
  }

  std::unique_ptr<client::DaemonClient> client_;
  v1::InfoResponse info_;
  std::string model_id_;
  uint16_t port_ = 0;
  bool durable_ = false;  // start without --ephemeral: sessions are kept in the state directory
};

TEST_F(HttpTcpTest, EveryRequestNeedsAKeyOfTheFile) {
  StartTcpDaemon();
  const std::string body = Chat("Hello there").dump();

  const std::string none = Exchange("POST", "/v1/chat/completions", body, Headers{});
  EXPECT_EQ(StatusOf(none), 401) << none;
  EXPECT_EQ(BodyOf(none)["error"]["type"], "authentication_error") << none;
  EXPECT_EQ(BodyOf(none)["error"]["code"], "invalid_api_key") << none;
  EXPECT_NE(BodyOf(none)["error"]["message"].get<std::string>().find("Authorization: Bearer KEY"), std::string::npos);

  const std::string wrong = Exchange("POST", "/v1/chat/completions", body, WithKey("not-a-key-0123456789-xyz"));
  EXPECT_EQ(StatusOf(wrong), 401) << wrong;
  EXPECT_EQ(BodyOf(wrong)["error"]["code"], "invalid_api_key") << wrong;
  // A prefix of a good key, a good key with a character more, another scheme: not keys.
  const std::string alice(kAliceKey);
  for (const std::string& authorization : {"Bearer " + alice.substr(0, alice.size() - 1), "Bearer " + alice + "x",
                                           "Basic " + alice, std::string("Bearer"), alice}) {
    Headers headers;
    headers.authorization = authorization;
    EXPECT_EQ(StatusOf(Exchange("POST", "/v1/chat/completions", body, headers)), 401) << authorization;
  }
  // x-api-key is Anthropic's header, not OpenAI's.
  Headers x_api_key;
  x_api_key.x_api_key = kAliceKey;
  EXPECT_EQ(StatusOf(Exchange("POST", "/v1/chat/completions", body, x_api_key)), 401);
  // Every route needs a key, /health and /metrics too.
  EXPECT_EQ(StatusOf(Exchange("GET", "/health", "", Headers{})), 401);
  EXPECT_EQ(StatusOf(Exchange("GET", "/metrics", "", Headers{})), 401);
  EXPECT_EQ(StatusOf(Exchange("GET", "/v1/models", "", Headers{})), 401);

  const std::string good = Exchange("POST", "/v1/chat/completions", body, WithKey(kAliceKey));
  ASSERT_EQ(StatusOf(good), 200) << good;
  EXPECT_EQ(BodyOf(good)["object"], "chat.completion") << good;
  EXPECT_GT(BodyOf(good)["usage"]["completion_tokens"].get<int>(), 0) << good;
  Headers lowercase_scheme;
  lowercase_scheme.authorization = std::string("bearer  ") + kBobKey;
  EXPECT_EQ(StatusOf(Exchange("GET", "/v1/models", "", lowercase_scheme)), 200);
  EXPECT_EQ(StatusOf(Exchange("GET", "/health", "", WithKey(kBobKey))), 200);

  // Anthropic's Messages API: its error shape, and its x-api-key header is taken.
  const std::string message_body = Message("Hello there").dump();
  const std::string anthropic_none = Exchange("POST", "/v1/messages", message_body, Headers{});
  EXPECT_EQ(StatusOf(anthropic_none), 401) << anthropic_none;
  EXPECT_EQ(BodyOf(anthropic_none)["type"], "error") << anthropic_none;
  EXPECT_EQ(BodyOf(anthropic_none)["error"]["type"], "authentication_error") << anthropic_none;
  Headers anthropic_wrong;
  anthropic_wrong.x_api_key = "not-a-key-0123456789-xyz";
  const std::string wrong_message = Exchange("POST", "/v1/messages", message_body, anthropic_wrong);
  EXPECT_EQ(StatusOf(wrong_message), 401) << wrong_message;
  EXPECT_EQ(BodyOf(wrong_message)["error"]["type"], "authentication_error") << wrong_message;
  const std::string with_x_api_key = Exchange("POST", "/v1/messages", message_body, x_api_key);
  ASSERT_EQ(StatusOf(with_x_api_key), 200) << with_x_api_key;
  EXPECT_EQ(BodyOf(with_x_api_key)["type"], "message") << with_x_api_key;
  EXPECT_EQ(StatusOf(Exchange("POST", "/v1/messages", message_body, WithKey(kBobKey))), 200);

  // A refused request leaves its kept-alive connection serving.
  TcpClient connection(port_);
  Headers keep_alive;
  keep_alive.keep_alive = true;
  ASSERT_TRUE(connection.Send(Request("GET", "/v1/models", "", keep_alive)));
  EXPECT_EQ(StatusOf(connection.ReadResponse(kBound)), 401);
  Headers keyed = WithKey(kAliceKey);
  keyed.keep_alive = true;
  ASSERT_TRUE(connection.Send(Request("GET", "/v1/models", "", keyed)));
  EXPECT_EQ(StatusOf(connection.ReadResponse(kBound)), 200);
  // No key is ever logged, and SIGTERM stops the listener with the rest: nielsd exits 0.
  EXPECT_EQ(daemon_->log().find(kAliceKey), std::string::npos);
  client_.reset();
  EXPECT_EQ(daemon_->Stop(), 0) << daemon_->log();
}

TEST_F(HttpTcpTest, AWebPagesRequestsAreRefused) {
  StartTcpDaemon({"--http-allow-origin", "http://localhost:3000", "--http-allow-host", "nielsd.internal"});
  const std::string body = Chat("Hello there").dump();
  for (const std::string host : {"localhost", "localhost:8080", "127.0.0.1", "[::1]:1234", "nielsd.internal:80"}) {
    Headers headers = WithKey(kAliceKey);
    headers.host = host;
    EXPECT_EQ(StatusOf(Exchange("POST", "/v1/chat/completions", body, headers)), 200) << host;
  }
  // DNS rebinding: the page's own name as the Host.
  Headers rebound = WithKey(kAliceKey);
  rebound.host = "attacker.example:" + std::to_string(port_);
  const std::string refused = Exchange("POST", "/v1/chat/completions", body, rebound);
  EXPECT_EQ(StatusOf(refused), 403) << refused;
  EXPECT_EQ(BodyOf(refused)["error"]["type"], "permission_error") << refused;
  EXPECT_NE(BodyOf(refused)["error"]["message"].get<std::string>().find("not a loopback name"), std::string::npos);
  const std::string refused_message = Exchange("POST", "/v1/messages", Message("Hi").dump(), rebound);
  EXPECT_EQ(StatusOf(refused_message), 403) << refused_message;
  EXPECT_EQ(BodyOf(refused_message)["type"], "error") << refused_message;
  EXPECT_EQ(BodyOf(refused_message)["error"]["type"], "permission_error") << refused_message;
  // Refused before the key is looked at: a page learns nothing about keys.
  Headers rebound_without_key;
  rebound_without_key.host = "attacker.example";
  EXPECT_EQ(StatusOf(Exchange("GET", "/v1/models", "", rebound_without_key)), 403);

  // Cross-origin requests from a page: refused, but for the origin allowed.
  for (const std::string origin : {"http://attacker.example", "null", "http://localhost:3001"}) {
    Headers headers = WithKey(kAliceKey);
    headers.origin = origin;
    const std::string response = Exchange("POST", "/v1/chat/completions", body, headers);
    EXPECT_EQ(StatusOf(response), 403) << origin << ": " << response;
    EXPECT_NE(BodyOf(response)["error"]["message"].get<std::string>().find("Origin"), std::string::npos);
  }
  Headers allowed = WithKey(kAliceKey);
  allowed.origin = "http://localhost:3000";
  const std::string from_allowed = Exchange("POST", "/v1/chat/completions", body, allowed);
  EXPECT_EQ(StatusOf(from_allowed), 200) << from_allowed;
}

TEST_F(HttpTcpTest, TheUnixSocketKeepsItsRules) {
  StartTcpDaemon();
  // The Unix HTTP socket beside the TCP listener is the uid's, with no key and no Host rule.
  testing::ProcessResult curl = testing::RunProcess(
      {"curl", "-sS", "--unix-socket", http_socket().string(), "-H", "Host: attacker.example", "-H",
       "Content-Type: application/json", "-d", Chat("Hello there").dump(), "http://attacker.example/v1/chat/completions"});
  ASSERT_EQ(curl.exit_code, 0) << curl.err;
  EXPECT_EQ(json::parse(curl.out, nullptr, false)["object"], "chat.completion") << curl.out;
}

TEST_F(HttpTcpTest, PrincipalsAreIdentitiesOfTheirOwn) {
  constexpr int kSessionsEach = 2;
  StartTcpDaemon({"--max-sessions-per-uid", std::to_string(kSessionsEach)});
  // A long prompt: several whole blocks of the KV pool.
  const std::string prompt =
      "Tell me everything about the daemon that serves language models on this machine, its sockets, its "
      "sessions and its caches, in as much detail as you can manage right now please.";
  auto cached = [&](const Headers& headers) -> int64_t {
    const std::string response = Exchange("POST", "/v1/chat/completions", Chat(prompt, 4).dump(), headers);
    EXPECT_EQ(StatusOf(response), 200) << response;
    return BodyOf(response)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  };
  EXPECT_EQ(cached(WithKey(kAliceKey)), 0);
  // Alice's second request finds her prompt's blocks; Bob, with the very same prompt, finds none
  // of them, and neither does the local uid on the Unix socket.
  EXPECT_GT(cached(WithKey(kAliceKey)), 0);
  EXPECT_EQ(cached(WithKey(kBobKey)), 0);
  testing::ProcessResult curl = testing::RunProcess({"curl", "-sS", "--unix-socket", http_socket().string(), "-H",
                                                     "Content-Type: application/json", "-d", Chat(prompt, 4).dump(),
                                                     "http://localhost/v1/chat/completions"});
  ASSERT_EQ(curl.exit_code, 0) << curl.err;
  EXPECT_EQ(json::parse(curl.out, nullptr, false)["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << curl.out;
  EXPECT_GT(cached(WithKey(kBobKey)), 0);  // and Bob's own second one does

  // Sessions: the local uid holds its whole quota on the protobuf socket, and a principal still
  // gets its own (n choices take n sessions at once); past the principal's quota, 429 naming it.
  for (int i = 0; i < kSessionsEach; ++i) {
    auto created = client_->CreateSession(std::nullopt);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
  }
  EXPECT_FALSE(client_->CreateSession(std::nullopt).ok());
  json two = Chat("Hello", 4);
  two["n"] = kSessionsEach;
  const std::string served = Exchange("POST", "/v1/chat/completions", two.dump(), WithKey(kAliceKey));
  ASSERT_EQ(StatusOf(served), 200) << served;
  EXPECT_EQ(BodyOf(served)["choices"].size(), static_cast<size_t>(kSessionsEach));
  json three = Chat("Hello", 4);
  three["n"] = kSessionsEach + 1;
  const std::string over = Exchange("POST", "/v1/chat/completions", three.dump(), WithKey(kAliceKey));
  EXPECT_EQ(StatusOf(over), 429) << over;
  const std::string over_message = BodyOf(over)["error"]["message"];
  EXPECT_NE(over_message.find("API-key principal"), std::string::npos) << over_message;
  EXPECT_EQ(over_message.find("uid "), std::string::npos) << over_message;
  // The principals' requests left nothing among the uid's sessions.
  auto listed = client_->ListSessions();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->sessions_size(), kSessionsEach);
}

TEST_F(HttpTcpTest, ConnectionsAreLimitedPerPrincipal) {
  constexpr int kLimit = 3;
  StartTcpDaemon({"--max-connections-per-uid", std::to_string(kLimit)});
  Headers alice = WithKey(kAliceKey);
  alice.keep_alive = true;
  std::vector<std::unique_ptr<TcpClient>> open;
  for (int i = 0; i < kLimit; ++i) {
    open.push_back(std::make_unique<TcpClient>(port_));
    ASSERT_TRUE(open.back()->Send(Request("GET", "/v1/models", "", alice)));
    ASSERT_EQ(StatusOf(open.back()->ReadResponse(kBound)), 200);
  }
  // One more of Alice's: 429 naming her, and closed.
  TcpClient extra(port_);
  ASSERT_TRUE(extra.Send(Request("GET", "/v1/models", "", alice)));
  bool closed = false;
  const std::string refused = extra.ReadResponse(kBound, &closed);
  EXPECT_EQ(StatusOf(refused), 429) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  EXPECT_NE(BodyOf(refused)["error"]["message"].get<std::string>().find("API-key principal alice"), std::string::npos)
      << refused;
  EXPECT_TRUE(closed);
  // Bob is counted apart, and Alice's open connections still serve her.
  Headers bob = WithKey(kBobKey);
  bob.keep_alive = true;
  std::vector<std::unique_ptr<TcpClient>> bobs;
  for (int i = 0; i < kLimit; ++i) {
    bobs.push_back(std::make_unique<TcpClient>(port_));
    ASSERT_TRUE(bobs.back()->Send(Request("GET", "/v1/models", "", bob)));
    EXPECT_EQ(StatusOf(bobs.back()->ReadResponse(kBound)), 200) << "bob's connection " << i;
  }
  ASSERT_TRUE(open.front()->Send(Request("GET", "/v1/models", "", alice)));
  EXPECT_EQ(StatusOf(open.front()->ReadResponse(kBound)), 200);
  // A connection whose next request carries Bob's key counts for Bob: he is at his limit.
  ASSERT_TRUE(open.back()->Send(Request("GET", "/v1/models", "", bob)));
  EXPECT_EQ(StatusOf(open.back()->ReadResponse(kBound)), 429);
  // Closing one of Alice's makes room for another of hers.
  open.erase(open.begin());
  bool admitted = false;
  for (const Clock::time_point deadline = Clock::now() + kBound; !admitted && Clock::now() < deadline;) {
    TcpClient next(port_);
    next.Send(Request("GET", "/v1/models", "", alice));
    admitted = StatusOf(next.ReadResponse(kBound)) == 200;
    if (!admitted) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(admitted);
}

TEST_F(HttpTcpTest, OfficialOpenAiClientOverTcpWithItsKey) {
  StartTcpDaemon();
  const std::string script = std::string(NIELS_SOURCE_DIR) + "/tests/integration/http/openai_client.cjs";
  ASSERT_TRUE(std::filesystem::exists(std::string(NIELS_HTTP_CLIENTS_DIR) + "/openai/package.json"))
      << "the openai npm package is not in " << NIELS_HTTP_CLIENTS_DIR << " (scripts/install_references.sh)";
  const std::string base_url = "http://127.0.0.1:" + std::to_string(port_) + "/v1";
  testing::ProcessResult result =
      testing::RunProcess({"node", script, base_url, model_id_, std::to_string(info_.context()), kAliceKey}, "",
                          {{"NODE_PATH", NIELS_HTTP_CLIENTS_DIR}}, milliseconds(180000));
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  json seen = json::parse(result.out, nullptr, false);
  ASSERT_TRUE(seen.is_object()) << result.out;
  EXPECT_EQ(seen["models"], json::array({model_id_}));
  EXPECT_FALSE(seen["chat"]["content"].get<std::string>().empty());
  EXPECT_EQ(seen["chat_stream"]["content"], seen["chat"]["content"]);
  EXPECT_EQ(seen["two_choices"].size(), 2u) << result.out;
  EXPECT_NE(seen["errors"]["oversized"].get<std::string>().find("413"), std::string::npos);
  EXPECT_NE(seen["errors"]["unauthorized"].get<std::string>().find("401"), std::string::npos) << result.out;
  std::cout << "openai client over TCP saw: " << result.out << "\n";
}

TEST_F(HttpTcpTest, ListensOnIpv6Loopback) {
  StartTcpDaemon({}, "::1");
  TcpClient connection(port_, /*ipv6=*/true);
  Headers headers = WithKey(kBobKey);
  headers.host = "[::1]:" + std::to_string(port_);
  ASSERT_TRUE(connection.Send(Request("POST", "/v1/chat/completions", Chat("Hello there").dump(), headers)));
  const std::string response = connection.ReadResponse(kBound);
  ASSERT_EQ(StatusOf(response), 200) << response;
  EXPECT_EQ(BodyOf(response)["object"], "chat.completion");
  TcpClient keyless(port_, /*ipv6=*/true);
  Headers no_key;
  no_key.host = headers.host;
  ASSERT_TRUE(keyless.Send(Request("GET", "/v1/models", "", no_key)));
  EXPECT_EQ(StatusOf(keyless.ReadResponse(kBound)), 401);
}

TEST_F(HttpTcpTest, OfficialAnthropicClientOverTcpWithItsKey) {
  StartTcpDaemon();
  const std::string script = std::string(NIELS_SOURCE_DIR) + "/tests/integration/http/anthropic_tcp_client.cjs";
  ASSERT_TRUE(std::filesystem::exists(std::string(NIELS_HTTP_CLIENTS_DIR) + "/@anthropic-ai/sdk/package.json"))
      << "the @anthropic-ai/sdk npm package is not in " << NIELS_HTTP_CLIENTS_DIR << " (scripts/install_references.sh)";
  testing::ProcessResult result = testing::RunProcess(
      {"node", script, "http://127.0.0.1:" + std::to_string(port_), model_id_, kBobKey}, "",
      {{"NODE_PATH", NIELS_HTTP_CLIENTS_DIR}}, milliseconds(120000));
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  json seen = json::parse(result.out, nullptr, false);
  ASSERT_TRUE(seen.is_object()) << result.out;
  EXPECT_EQ(seen["message"]["type"], "message") << result.out;
  EXPECT_GT(seen["message"]["output_tokens"].get<int>(), 0) << result.out;
  EXPECT_EQ(seen["streamed_text"], seen["message"]["text"]) << result.out;
  EXPECT_EQ(seen["unauthorized"]["status"], 401) << result.out;
  EXPECT_EQ(seen["unauthorized"]["type"], "authentication_error") << result.out;
  std::cout << "anthropic client over TCP saw: " << result.out << "\n";
}

TEST_F(HttpTcpTest, WhatTheListenerMustNotTakeStopsNielsdAtStart) {
  WriteKeys(0600);
  const std::string keys = keys_file().string();
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--http-listen", "0.0.0.0:8080", "--api-keys", keys}, "0.0.0.0 is not a loopback address"},
      {{"--http-listen", "8.8.8.8:80", "--api-keys", keys}, "8.8.8.8 is not a loopback address"},
      {{"--http-listen", "[::]:8080", "--api-keys", keys}, ":: is not a loopback address"},
      {{"--http-listen", "localhost:8080", "--api-keys", keys}, "host names are not taken"},
      {{"--http-listen", "127.0.0.1:0"}, "--http-listen 127.0.0.1:0 needs --api-keys FILE"},
      {{"--api-keys", keys}, "--http-listen, which is not given"},
      {{"--http-listen", "127.0.0.1:0", "--api-keys", (dir_.path() / "missing").string()}, "No such file"},
  };
  for (const Case& c : cases) {
    const auto [code, log] = RunRefused(c.args);
    EXPECT_NE(code, 0) << log;
    EXPECT_NE(log.find(c.expected), std::string::npos) << "expected '" << c.expected << "' in:\n" << log;
  }
  // A key file its group or others can read.
  ASSERT_EQ(::chmod(keys_file().c_str(), 0644), 0);
  const auto [code, log] = RunRefused({"--http-listen", "127.0.0.1:0", "--api-keys", keys});
  EXPECT_NE(code, 0) << log;
  EXPECT_NE(log.find("--api-keys " + keys + ": mode 0644"), std::string::npos) << log;
  // A key file with a key twice.
  std::ofstream(keys_file()) << kAliceKey << " alice\n" << kAliceKey << " bob\n";
  ASSERT_EQ(::chmod(keys_file().c_str(), 0600), 0);
  const auto [twice_code, twice_log] = RunRefused({"--http-listen", "127.0.0.1:0", "--api-keys", keys});
  EXPECT_NE(twice_code, 0) << twice_log;
  EXPECT_NE(twice_log.find("line 2: the key of line 1 again"), std::string::npos) << twice_log;
  EXPECT_EQ(twice_log.find(kAliceKey), std::string::npos) << twice_log;
}

}  // namespace http_tcp_test
}  // namespace niels::integration

namespace niels::integration {
namespace http_tcp_test {

// A request bound to a durable session (nielsd_session / X-Nielsd-Session) runs on it: its
// conversation replaces the session's, reusing what the session holds, and the session keeps it;
// another principal's request for it is the 404 of a session that does not exist.
TEST_F(HttpTcpTest, RequestsBoundToADurableSessionRunOnIt) {
  durable_ = true;
  StartTcpDaemon();
  const std::string system = "You are terse.";
  auto created = client_->CreateSession(system);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string id = created->session_id();
  const std::string user1 = "Tell me about the sockets of the daemon that serves models on this machine.";
  const std::string user2 = "And its caches?";
  auto chat = [&](const json& messages) {
    return json{{"model", model_id_}, {"messages", messages}, {"max_tokens", 5}, {"temperature", 0}};
  };
  auto session_messages = [&]() {
    auto got = client_->GetSession(id);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    std::vector<std::pair<std::string, std::string>> out;
    if (got.ok()) {
      for (const v1::ChatMessage& message : got->messages()) out.emplace_back(message.role(), message.content());
    }
    return out;
  };
  auto session_length = [&]() -> int64_t {
    auto got = client_->GetSession(id);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return got.ok() ? got->session().length() : -1;
  };

  // Turn 1 by the body field, with the session's own system prompt.
  json turn1 = chat({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user1}}});
  turn1["nielsd_session"] = id;
  auto [status1, answer1] = PostOnSocket("/v1/chat/completions", turn1);
  ASSERT_EQ(status1, 200) << answer1.dump();
  const std::string reply1 = answer1["choices"][0]["message"]["content"];
  const int64_t length1 = session_length();
  using Messages = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(session_messages(), (Messages{{"system", system}, {"user", user1}, {"assistant", reply1}}));
  // The system prompt was the session's already: its tokens came from the session.
  EXPECT_GT(answer1["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << answer1.dump();

  // Turn 2 by the header, the conversation re-sent whole (without the system prompt): it costs its
  // new tokens only, everything the session held is reused.
  const json conversation2 = {{{"role", "user"}, {"content", user1}},
                              {{"role", "assistant"}, {"content", reply1}},
                              {{"role", "user"}, {"content", user2}}};
  auto [status2, answer2] = PostOnSocket("/v1/chat/completions", chat(conversation2), {"X-Nielsd-Session: " + id});
  ASSERT_EQ(status2, 200) << answer2.dump();
  const std::string reply2 = answer2["choices"][0]["message"]["content"];
  const int64_t cached2 = answer2["usage"]["prompt_tokens_details"]["cached_tokens"];
  const int64_t prompt2 = answer2["usage"]["prompt_tokens"];
  // (Two tokens of the history have not been through the model: the reply's last sampled token and
  // the end-of-turn id that closes a reply cut by max_tokens. A stateless request would find whole
  // blocks of 16 only.)
  EXPECT_GE(cached2, length1 - 2) << answer2.dump() << " after a session of " << length1 << " tokens";
  EXPECT_GT(prompt2, cached2);
  EXPECT_EQ(session_messages(), (Messages{{"system", system},
                                          {"user", user1},
                                          {"assistant", reply1},
                                          {"user", user2},
                                          {"assistant", reply2}}));

  // The same conversation again (regenerate the last reply): the session is cut back to it, not
  // grown; greedy, the reply is the same.
  auto [status3, answer3] = PostOnSocket("/v1/chat/completions", chat(conversation2), {"X-Nielsd-Session: " + id});
  ASSERT_EQ(status3, 200) << answer3.dump();
  EXPECT_EQ(answer3["choices"][0]["message"]["content"], reply2);
  EXPECT_EQ(session_messages().size(), 5u);

  // Anthropic's Messages API on the same session, with header and body field agreeing.
  json message = {{"model", model_id_}, {"max_tokens", 5}, {"temperature", 0}, {"system", system},
                  {"nielsd_session", id},
                  {"messages", {{{"role", "user"}, {"content", user1}}, {{"role", "assistant"}, {"content", reply1}},
                                {{"role", "user"}, {"content", user2}}, {{"role", "assistant"}, {"content", reply2}},
                                {{"role", "user"}, {"content", "Thanks."}}}}};
  auto [status4, answer4] = PostOnSocket("/v1/messages", message, {"X-Nielsd-Session: " + id});
  ASSERT_EQ(status4, 200) << answer4.dump();
  EXPECT_GT(answer4["usage"]["cache_read_input_tokens"].get<int64_t>(), cached2) << answer4.dump();
  EXPECT_EQ(session_messages().size(), 7u);
  const int64_t held = session_length();

  // Another principal (over TCP with its key) cannot use it, and learns nothing: the same 404 as
  // for a session that does not exist, on every API.
  const std::string missing = "0123456789abcdef0123456789abcdef";
  auto refused = [&](const std::string& path, json body, const std::string& session) {
    body["nielsd_session"] = session;
    const std::string response = Exchange("POST", path, body.dump(), WithKey(kAliceKey));
    EXPECT_EQ(StatusOf(response), 404) << response;
    std::string text = BodyOf(response).dump();
    for (size_t at = text.find(session); at != std::string::npos; at = text.find(session)) {
      text.replace(at, session.size(), "ID");
    }
    return text;
  };
  const json completion = {{"model", model_id_}, {"prompt", "Hello"}, {"max_tokens", 3}};
  for (const auto& [path, body] : std::vector<std::pair<std::string, json>>{
           {"/v1/chat/completions", chat(conversation2)}, {"/v1/messages", message}, {"/v1/completions", completion}}) {
    const std::string others = refused(path, body, id);
    EXPECT_EQ(others, refused(path, body, missing)) << path;
    EXPECT_NE(others.find("unknown session"), std::string::npos) << others;
    EXPECT_EQ(others.find("another"), std::string::npos) << others;
  }
  EXPECT_NE(refused("/v1/chat/completions", chat(conversation2), id).find("\"param\":\"nielsd_session\""),
            std::string::npos);
  EXPECT_NE(refused("/v1/messages", message, id).find("not_found_error"), std::string::npos);
  EXPECT_EQ(session_length(), held);

  // Bad values are 400s naming the field; nothing runs.
  auto bad = [&](json body, const std::vector<std::string>& headers, const std::string& param) {
    auto [status, answer] = PostOnSocket("/v1/chat/completions", body, headers);
    EXPECT_EQ(status, 400) << answer.dump();
    EXPECT_EQ(answer["error"]["param"], param) << answer.dump();
  };
  json number = chat(conversation2);
  number["nielsd_session"] = 7;
  bad(number, {}, "nielsd_session");
  json not_an_id = chat(conversation2);
  not_an_id["nielsd_session"] = "../" + id;
  bad(not_an_id, {}, "nielsd_session");
  bad(chat(conversation2), {"X-Nielsd-Session: " + id.substr(1)}, "X-Nielsd-Session");
  bad(chat(conversation2), {"X-Nielsd-Session: " + id, "X-Nielsd-Session: " + id}, "X-Nielsd-Session");
  json conflict = chat(conversation2);
  conflict["nielsd_session"] = missing;
  bad(conflict, {"X-Nielsd-Session: " + id}, "nielsd_session");
  json choices = chat(conversation2);
  choices["n"] = 2;
  bad(choices, {"X-Nielsd-Session: " + id}, "n");
  json other_system = chat(conversation2);
  other_system["messages"].insert(other_system["messages"].begin(), {{"role", "system"}, {"content", "Be verbose."}});
  bad(other_system, {"X-Nielsd-Session: " + id}, "messages[0]");
  auto [anthropic_status, anthropic_answer] =
      PostOnSocket("/v1/messages", message, {"X-Nielsd-Session: " + missing});
  EXPECT_EQ(anthropic_status, 400) << anthropic_answer.dump();
  EXPECT_EQ(anthropic_answer["type"], "error") << anthropic_answer.dump();
  EXPECT_NE(anthropic_answer["error"]["message"].get<std::string>().find("nielsd_session"), std::string::npos);
  EXPECT_EQ(session_length(), held);
  EXPECT_EQ(session_messages().size(), 7u);

  // Completions on a session continue its tokens: the second prompt follows the first's completion,
  // all of which it reuses.
  auto raw = client_->CreateSession(std::nullopt);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  json first = {{"model", model_id_}, {"prompt", "Once upon a time"}, {"max_tokens", 3}, {"temperature", 0},
                {"nielsd_session", raw->session_id()}};
  auto [first_status, first_answer] = PostOnSocket("/v1/completions", first);
  ASSERT_EQ(first_status, 200) << first_answer.dump();
  json second = {{"model", model_id_}, {"prompt", " there was"}, {"max_tokens", 3}, {"temperature", 0}};
  auto [second_status, second_answer] =
      PostOnSocket("/v1/completions", second, {"X-Nielsd-Session: " + raw->session_id()});
  ASSERT_EQ(second_status, 200) << second_answer.dump();
  const int64_t first_total = first_answer["usage"]["total_tokens"];
  EXPECT_GE(second_answer["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), first_total - 1)
      << first_answer.dump() << second_answer.dump();
  auto raw_after = client_->GetSession(raw->session_id());
  ASSERT_TRUE(raw_after.ok()) << raw_after.status().ToString();
  EXPECT_EQ(raw_after->session().length(), second_answer["usage"]["total_tokens"].get<int64_t>());
}

}  // namespace http_tcp_test
}  // namespace niels::integration
