// nielsd-http-bench: what the HTTP front (nielsd --http-socket) costs against the protobuf socket,
// side by side in one run against a RUNNING nielsd that serves both (bench/vs_llamacpp.py http
// starts one on a Qwen3-shaped GGUF and runs this). It starts nothing itself.
//
//   gap       batch 1: one streamed chat reply of --tokens tokens, greedy, the same prompt, over the
//             protobuf socket (Chat, stream) and over HTTP (/v1/chat/completions, stream: SSE), --runs
//             times each, alternating: the gaps between consecutive tokens that add text as the client
//             receives them (a token of a partial UTF-8 character adds none, on either path), median
//             and p95, and the ratio HTTP / protobuf.
//   clients   --clients concurrent streaming clients, each its own connection and its own prompt, one
//             reply of --client-tokens tokens each: aggregate tokens per second (all replies' tokens
//             over the wall time from the first request to the last reply), --client-rounds rounds,
//             each path once a round and first in every other; the medians of the rounds.
//   turns     a --turns-turn conversation, --turn-tokens tokens per reply: on a protobuf session (one
//             Chat per turn, the user's text only), re-sent whole over /v1/chat/completions each turn
//             (stateless: the prefix index serves what it holds), and re-sent whole bound to a session
//             (nielsd_session), each variant with a system prompt of its own (so none finds another's
//             blocks in the prefix index). Per turn the time to the first token that adds text, as the client
//             sees it, and the prompt tokens reused; the ratios of the HTTP variants to the session
//             per turn and of their medians over turns 2..N.
// Every reply has its length: the ids given with --ban (the model's end-of-turn ids) get a logit
// bias of -100 on both paths (HTTP's logit_bias), so neither reply ends early; thinking is off
// (enable_thinking false). The HTTP client is this program's own (HTTP/1.1 over the Unix socket, a
// connection per request, chunked SSE parsed as it arrives): no library's overhead.
//
// Output: a table, or with --json one JSON line per figure.
// Links only the client library and common (no libtorch).

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/bench_stats.h"
#include "client/daemon_client.h"

namespace niels::bench {
namespace {

using client::DaemonClient;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace v1 = ::niels::v1;

struct Options {
  std::string socket;
  std::string http_socket;
  std::vector<int> banned_ids;
  int tokens = 64;
  int runs = 3;
  int clients = 32;
  int client_tokens = 32;
  int client_rounds = 2;
  int turns = 20;
  int turn_tokens = 8;
  std::string label;
  bool json = false;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "nielsd-http-bench: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void Fail(const std::string& what, const common::Status& status) { Die(what + ": " + status.ToString()); }

// ---- a minimal HTTP/1.1 client of a Unix socket ----

// One POST with a JSON body on a fresh connection (Connection: close). `on_event` gets each SSE
// event's data (after "data: ") as soon as its bytes arrived; a plain answer's body is returned.
struct HttpResult {
  int status = 0;
  std::string body;  // the whole body of a non-streamed answer (for a stream: empty)
};

HttpResult Post(const std::string& socket_path, const std::string& path, const std::string& body,
                const std::function<void(std::string_view data)>& on_event = nullptr) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    Die("cannot connect to " + socket_path + ": " + std::strerror(errno));
  }
  std::string request = "POST " + path +
                        " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n"
                        "Content-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body;
  for (std::string_view left = request; !left.empty();) {
    const ssize_t n = ::send(fd, left.data(), left.size(), MSG_NOSIGNAL);
    if (n <= 0) Die("cannot send to " + socket_path);
    left.remove_prefix(static_cast<size_t>(n));
  }
  HttpResult result;
  std::string in;  // bytes received and not yet consumed
  bool head_done = false, chunked = false;
  std::string events;  // de-chunked body bytes not yet split into events
  enum class Chunk { kSize, kData, kEnd, kDone } state = Chunk::kSize;
  size_t chunk_left = 0;  // bytes of the current chunk still to come
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    in.append(buffer, static_cast<size_t>(n));
    if (!head_done) {
      const size_t head_end = in.find("\r\n\r\n");
      if (head_end == std::string::npos) continue;
      const std::string head = in.substr(0, head_end);
      result.status = in.size() > 12 ? std::atoi(in.c_str() + 9) : 0;
      chunked = head.find("Transfer-Encoding: chunked") != std::string::npos ||
                head.find("transfer-encoding: chunked") != std::string::npos;
      in.erase(0, head_end + 4);
      head_done = true;
    }
    if (!chunked) continue;
    // De-chunk what is there: size line, data, CRLF, ...
    for (bool progress = true; progress && state != Chunk::kDone;) {
      progress = false;
      if (state == Chunk::kSize) {
        const size_t line_end = in.find("\r\n");
        if (line_end == std::string::npos) break;
        chunk_left = std::strtoul(in.c_str(), nullptr, 16);
        in.erase(0, line_end + 2);
        state = chunk_left == 0 ? Chunk::kDone : Chunk::kData;
        progress = true;
      } else if (state == Chunk::kData) {
        const size_t take = std::min(chunk_left, in.size());
        events.append(in, 0, take);
        in.erase(0, take);
        chunk_left -= take;
        if (chunk_left == 0) state = Chunk::kEnd;
        progress = take > 0 || state == Chunk::kEnd;
      } else if (state == Chunk::kEnd && in.size() >= 2) {
        in.erase(0, 2);
        state = Chunk::kSize;
        progress = true;
      }
    }
    for (size_t end; (end = events.find("\n\n")) != std::string::npos;) {
      std::string_view event(events.data(), end);
      if (event.rfind("data: ", 0) == 0 && on_event) on_event(event.substr(6));
      events.erase(0, end + 2);
    }
    if (state == Chunk::kDone) break;
  }
  ::close(fd);
  if (!chunked) result.body = in;
  return result;
}

std::string Words(int seed, int words) {
  static const char* const kWords[] = {"please", "tell", "me", "more", "about", "the", "sockets", "today",
                                       "and", "tomorrow", "in", "this", "daemon", "thanks", "again", "now"};
  std::string text;
  for (int i = 0; i < words; ++i) text += std::string(i ? " " : "") + kWords[(seed + i * 3) % std::size(kWords)];
  return text;
}

// ---- the two paths ----

json HttpChat(const Options& o, const json& messages, int max_tokens) {
  json bias = json::object();
  for (int id : o.banned_ids) bias[std::to_string(id)] = -100;
  return {{"model", "default"},
          {"messages", messages},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", true},
          {"stream_options", {{"include_usage", true}}},
          {"logit_bias", bias},
          {"chat_template_kwargs", {{"enable_thinking", false}}}};
}

v1::ChatRequest NativeChat(const Options& o, const std::string& session, int max_tokens) {
  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_max_new_tokens(max_tokens);
  request.set_stream(true);
  request.set_enable_thinking(false);
  request.mutable_sampling()->set_temperature(0.0f);
  for (int id : o.banned_ids) {
    v1::TokenBias* bias = request.mutable_sampling()->add_logit_bias();
    bias->set_id(id);
    bias->set_bias(-100.0f);
  }
  return request;
}

// One streamed reply as a client sees it: when each token that adds text arrived, the text, the
// usage.
struct Streamed {
  Clock::time_point start;
  std::vector<Clock::time_point> texts;  // arrival of each event that adds text
  std::string text;
  int64_t generated = 0, prompt = 0, reused = 0;
};

Streamed RunHttp(const Options& o, const json& body) {
  Streamed s;
  s.start = Clock::now();
  const HttpResult result = Post(o.http_socket, "/v1/chat/completions", body.dump(), [&](std::string_view data) {
    const Clock::time_point now = Clock::now();
    if (data == "[DONE]") return;
    const json chunk = json::parse(data, nullptr, false);
    if (chunk.contains("error")) Die("HTTP stream error: " + std::string(data));
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      s.generated = chunk["usage"]["completion_tokens"].get<int64_t>();
      s.prompt = chunk["usage"]["prompt_tokens"].get<int64_t>();
      s.reused = chunk["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    }
    if (!chunk.contains("choices") || chunk["choices"].empty()) return;
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string() && !delta["content"].get<std::string>().empty()) {
      s.texts.push_back(now);
      s.text += delta["content"].get<std::string>();
    }
  });
  if (result.status != 200) Die("HTTP status " + std::to_string(result.status) + ": " + result.body);
  return s;
}

Streamed RunNative(DaemonClient& client, const v1::ChatRequest& request) {
  Streamed s;
  s.start = Clock::now();
  auto reply = client.Chat(request, [&](const v1::TokenEvent& event) {
    if (event.text().empty()) return;
    s.texts.push_back(Clock::now());
    s.text += event.text();
  });
  if (!reply.ok()) Fail("Chat", reply.status());
  s.generated = reply->stats().generated_tokens();
  s.prompt = reply->stats().prompt_tokens();
  s.reused = reply->stats().reused_tokens();
  return s;
}

std::vector<double> Gaps(const Streamed& s) {
  std::vector<double> gaps;
  for (size_t i = 1; i < s.texts.size(); ++i) gaps.push_back(Ms(s.texts[i] - s.texts[i - 1]));
  return gaps;
}

double FirstTextMs(const Streamed& s) { return s.texts.empty() ? -1.0 : Ms(s.texts.front() - s.start); }

std::unique_ptr<DaemonClient> Connect(const Options& o) {
  auto connected = DaemonClient::Connect(o.socket);
  if (!connected.ok()) Fail("connect", connected.status());
  return std::move(*connected);
}

std::string NewSession(DaemonClient& client) {
  auto created = client.CreateSession(std::nullopt);
  if (!created.ok()) Fail("CreateSession", created.status());
  return created->session_id();
}

void DropSession(DaemonClient& client, const std::string& id) {
  auto deleted = client.DeleteSession(id);
  if (!deleted.ok()) Fail("DeleteSession", deleted.status());
}

void Emit(const Options& o, const json& line, const std::string& text) {
  if (o.json) {
    json out = line;
    if (!o.label.empty()) out["label"] = o.label;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%s\n", text.c_str());
  }
  std::fflush(stdout);
}

std::string Format(const char* format, auto... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, format, args...);
  return buffer;
}

// ---- the three figures ----

void GapBench(const Options& o) {
  auto client = Connect(o);
  const std::string prompt = "Write a long story about " + Words(1, 12) + ".";
  std::vector<double> native_gaps, http_gaps;
  bool same_text = true;
  for (int run = 0; run < o.runs; ++run) {
    const std::string session = NewSession(*client);
    v1::ChatRequest request = NativeChat(o, session, o.tokens);
    request.set_user_text(prompt);
    const Streamed native = RunNative(*client, request);
    DropSession(*client, session);
    const Streamed http = RunHttp(o, HttpChat(o, json::array({{{"role", "user"}, {"content", prompt}}}), o.tokens));
    same_text = same_text && native.text == http.text;
    for (double gap : Gaps(native)) native_gaps.push_back(gap);
    for (double gap : Gaps(http)) http_gaps.push_back(gap);
  }
  if (native_gaps.empty() || http_gaps.empty()) Die("gap: no two tokens with text in a reply");
  const double native_median = Quantile(native_gaps, 0.5), http_median = Quantile(http_gaps, 0.5);
  const double native_p95 = Quantile(native_gaps, 0.95), http_p95 = Quantile(http_gaps, 0.95);
  Emit(o,
       {{"bench", "http_gap"}, {"tokens", o.tokens}, {"runs", o.runs}, {"native_median_ms", native_median},
        {"http_median_ms", http_median}, {"native_p95_ms", native_p95}, {"http_p95_ms", http_p95},
        {"median_ratio", http_median / native_median}, {"p95_ratio", http_p95 / native_p95},
        {"gaps", native_gaps.size()}, {"same_text", same_text}},
       Format("inter-token gap, batch 1 (%d runs x %d tokens, %zu/%zu gaps; same text on both: %s)\n"
              "  %-10s %10s %10s\n  %-10s %8.2f ms %7.2f ms\n  %-10s %8.2f ms %7.2f ms\n  %-10s %9.3fx %9.3fx",
              o.runs, o.tokens, native_gaps.size(), http_gaps.size(), same_text ? "yes" : "NO", "", "median", "p95",
              "protobuf", native_median, native_p95, "HTTP SSE", http_median, http_p95, "HTTP/pb",
              http_median / native_median, http_p95 / native_p95));
}

// All clients start together; the aggregate tok/s and the slowest client's time.
struct Aggregate {
  double tok_s = 0, wall_s = 0;
  int64_t tokens = 0;
};

Aggregate Concurrent(const Options& o, bool http, int round) {
  std::vector<std::unique_ptr<DaemonClient>> clients;
  std::vector<std::string> sessions;
  if (!http) {
    for (int i = 0; i < o.clients; ++i) {
      clients.push_back(Connect(o));
      sessions.push_back(NewSession(*clients.back()));
    }
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<int64_t> generated(static_cast<size_t>(o.clients), 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < o.clients; ++i) {
    threads.emplace_back([&, i] {
      // Distinct from the first token on (round, path, client): no prompt finds another's blocks.
      const std::string prompt = "Round " + std::to_string(round) + (http ? " HTTP" : " protobuf") + " client " +
                                 std::to_string(i) + ": write about " + Words(i, 10) + ".";
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      if (http) {
        generated[static_cast<size_t>(i)] =
            RunHttp(o, HttpChat(o, json::array({{{"role", "user"}, {"content", prompt}}}), o.client_tokens)).generated;
      } else {
        v1::ChatRequest request = NativeChat(o, sessions[static_cast<size_t>(i)], o.client_tokens);
        request.set_user_text(prompt);
        generated[static_cast<size_t>(i)] = RunNative(*clients[static_cast<size_t>(i)], request).generated;
      }
    });
  }
  while (ready.load() < o.clients) std::this_thread::yield();
  const Clock::time_point start = Clock::now();
  go.store(true);
  for (std::thread& thread : threads) thread.join();
  Aggregate a;
  a.wall_s = Ms(Clock::now() - start) / 1e3;
  for (int64_t g : generated) a.tokens += g;
  a.tok_s = static_cast<double>(a.tokens) / a.wall_s;
  for (size_t i = 0; i < sessions.size(); ++i) DropSession(*clients[i], sessions[i]);
  return a;
}

void ClientsBench(const Options& o) {
  // Rounds alternate which path goes first (protobuf, HTTP; then HTTP, protobuf; ...): the median
  // of each path's rounds.
  std::vector<double> native_rates, http_rates;
  int64_t native_tokens = 0, http_tokens = 0;
  for (int round = 0; round < o.client_rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const bool http = (k == 1) != (round % 2 == 1);
      const Aggregate a = Concurrent(o, http, round);
      (http ? http_rates : native_rates).push_back(a.tok_s);
      (http ? http_tokens : native_tokens) += a.tokens;
    }
  }
  const double native = Quantile(native_rates, 0.5), http = Quantile(http_rates, 0.5);
  std::string rounds_text;
  for (size_t i = 0; i < native_rates.size(); ++i) {
    rounds_text += Format("%s%.1f/%.1f", i ? ", " : "", native_rates[i], http_rates[i]);
  }
  Emit(o,
       {{"bench", "http_clients"}, {"clients", o.clients}, {"tokens_each", o.client_tokens},
        {"rounds", o.client_rounds}, {"native_tok_s", native}, {"http_tok_s", http},
        {"native_rounds_tok_s", native_rates}, {"http_rounds_tok_s", http_rates}, {"ratio", http / native}},
       Format("%d concurrent streaming clients x %d tokens, %d rounds (protobuf/HTTP tok/s per round: %s)\n"
              "  aggregate tok/s, median of the rounds: protobuf %.1f, HTTP SSE %.1f, HTTP/pb %.3fx",
              o.clients, o.client_tokens, o.client_rounds, rounds_text.c_str(), native, http, http / native));
}

void TurnsBench(const Options& o) {
  auto client = Connect(o);
  // Each variant's own system prompt (of one length), so that no variant finds another's blocks in
  // the prefix index: the stateless requests reuse only what their own earlier turns left.
  auto system = [](char variant) { return std::string("You are assistant ") + variant + ". Answer briefly."; };
  auto created = [&](char variant) {
    auto made = client->CreateSession(system(variant));
    if (!made.ok()) Fail("CreateSession", made.status());
    return made->session_id();
  };
  const std::string native_session = created('A');
  const std::string bound_session = created('C');
  json stateless_messages = json::array({{{"role", "system"}, {"content", system('B')}}});
  json bound_messages = json::array({{{"role", "system"}, {"content", system('C')}}});
  std::vector<double> native_ttft, stateless_ttft, bound_ttft;
  if (!o.json) {
    std::printf("%d-turn conversation, %d tokens per reply: time to first token per turn\n", o.turns, o.turn_tokens);
    std::printf("  turn   session ms (reused)   HTTP whole ms (cached)  ratio   HTTP+nielsd_session ms (cached)  ratio\n");
  }
  for (int t = 1; t <= o.turns; ++t) {
    // Distinct words per turn, about 20 tokens of user text.
    const std::string user = "Turn " + std::to_string(t) + ": " + Words(t * 5, 14) + "?";
    v1::ChatRequest request = NativeChat(o, native_session, o.turn_tokens);
    request.set_user_text(user);
    const Streamed native = RunNative(*client, request);

    stateless_messages.push_back({{"role", "user"}, {"content", user}});
    const Streamed stateless = RunHttp(o, HttpChat(o, stateless_messages, o.turn_tokens));
    stateless_messages.push_back({{"role", "assistant"}, {"content", stateless.text}});

    bound_messages.push_back({{"role", "user"}, {"content", user}});
    json bound_body = HttpChat(o, bound_messages, o.turn_tokens);
    bound_body["nielsd_session"] = bound_session;
    const Streamed bound = RunHttp(o, bound_body);
    bound_messages.push_back({{"role", "assistant"}, {"content", bound.text}});

    native_ttft.push_back(FirstTextMs(native));
    stateless_ttft.push_back(FirstTextMs(stateless));
    bound_ttft.push_back(FirstTextMs(bound));
    const double stateless_ratio = stateless_ttft.back() / native_ttft.back();
    const double bound_ratio = bound_ttft.back() / native_ttft.back();
    Emit(o,
         {{"bench", "http_turn"}, {"turn", t}, {"session_ttft_ms", native_ttft.back()},
          {"session_reused", native.reused}, {"session_prompt", native.prompt},
          {"http_ttft_ms", stateless_ttft.back()}, {"http_cached", stateless.reused}, {"http_prompt", stateless.prompt},
          {"bound_ttft_ms", bound_ttft.back()}, {"bound_cached", bound.reused}, {"bound_prompt", bound.prompt},
          {"http_ratio", stateless_ratio}, {"bound_ratio", bound_ratio}},
         Format("  %4d %10.1f (%4lld/%4lld) %10.1f (%4lld/%4lld) %6.2fx %16.1f (%4lld/%4lld) %12.2fx", t,
                native_ttft.back(), (long long)native.reused, (long long)native.prompt, stateless_ttft.back(),
                (long long)stateless.reused, (long long)stateless.prompt, stateless_ratio, bound_ttft.back(),
                (long long)bound.reused, (long long)bound.prompt, bound_ratio));
  }
  DropSession(*client, native_session);
  DropSession(*client, bound_session);
  if (o.turns < 2) return;
  auto later = [](const std::vector<double>& v) { return std::vector<double>(v.begin() + 1, v.end()); };
  const double native_median = Quantile(later(native_ttft), 0.5);
  const double stateless_median = Quantile(later(stateless_ttft), 0.5);
  const double bound_median = Quantile(later(bound_ttft), 0.5);
  std::vector<double> stateless_ratios, bound_ratios;
  for (size_t i = 1; i < native_ttft.size(); ++i) {
    stateless_ratios.push_back(stateless_ttft[i] / native_ttft[i]);
    bound_ratios.push_back(bound_ttft[i] / native_ttft[i]);
  }
  Emit(o,
       {{"bench", "http_turns_summary"}, {"turns", o.turns}, {"session_median_ms", native_median},
        {"http_median_ms", stateless_median}, {"bound_median_ms", bound_median},
        {"http_ratio_of_medians", stateless_median / native_median},
        {"bound_ratio_of_medians", bound_median / native_median},
        {"http_worst_ratio", *std::max_element(stateless_ratios.begin(), stateless_ratios.end())},
        {"bound_worst_ratio", *std::max_element(bound_ratios.begin(), bound_ratios.end())}},
       Format("  turns 2..%d median ttft: session %.1f ms, HTTP whole %.1f ms (%.2fx, worst turn %.2fx), "
              "HTTP on a session %.1f ms (%.2fx, worst turn %.2fx)",
              o.turns, native_median, stateless_median, stateless_median / native_median,
              *std::max_element(stateless_ratios.begin(), stateless_ratios.end()), bound_median,
              bound_median / native_median, *std::max_element(bound_ratios.begin(), bound_ratios.end())));
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"nielsd-http-bench: the HTTP front against the protobuf socket, through a running nielsd"};
  app.add_option("--socket", o.socket, "nielsd's protobuf socket")->required();
  app.add_option("--http-socket", o.http_socket, "nielsd's HTTP socket (--http-socket)")->required();
  app.add_option("--ban", o.banned_ids, "ids biased by -100 on both paths (the model's end-of-turn ids)");
  app.add_option("--tokens", o.tokens, "tokens of each batch-1 reply (gap)")->check(CLI::Range(2, 4096))
      ->capture_default_str();
  app.add_option("--runs", o.runs, "batch-1 replies per path (gap)")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--clients", o.clients, "concurrent streaming clients")->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--client-tokens", o.client_tokens, "tokens of each concurrent client's reply")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--client-rounds", o.client_rounds, "rounds of the concurrent clients (each path once a round)")
      ->check(CLI::Range(1, 20))->capture_default_str();
  app.add_option("--turns", o.turns, "turns of the conversation")->check(CLI::Range(1, 200))->capture_default_str();
  app.add_option("--turn-tokens", o.turn_tokens, "tokens of each turn's reply")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--label", o.label, "a label for the JSON lines (the model's shape)");
  app.add_flag("--json", o.json, "one JSON line per figure");
  CLI11_PARSE(app, argc, argv);
  if (!o.json && !o.label.empty()) std::printf("# %s\n", o.label.c_str());
  GapBench(o);
  ClientsBench(o);
  TurnsBench(o);
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) { return niels::bench::Main(argc, argv); }
