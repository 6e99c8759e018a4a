// nielsd-load-bench: how a RUNNING nielsd serves several clients at once, measured through its
// socket as users see it. It starts nothing itself: start nielsd first (README.md, "Benchmarks",
// shows how to make a random-weight model of the `personal` or `base` shape and serve it).
//
// Load: for each N in --clients (default 1,2,4,8,16), N clients -- each its own connection and
// session -- send at the same moment one streamed Generate of --prompt-tokens random input ids and
// --new-tokens new ids (eot banned, so every request generates exactly that many). Per N it prints
// the aggregate generated tokens/s (all tokens / time from the common start to the last final
// response), the time to first token p50/p99 and the per-request latency min/max. Every request
// has a prompt of its own (seeded by round, N and client), so no request finds another's prompt in
// nielsd's prefix cache. With --rounds R the client counts run R times in turn (1 2 4 ..., 1 2 4
// ..., so a slow minute on a shared machine hits every N alike), and a summary gives per N the
// median of each figure and the aggregate's ratio to one client's.
// Short chat: the latency of a Chat of --short-tokens tokens on a fresh session, on an idle daemon
// and while another client streams a --long-tokens Generate after a 16-token prompt (median of
// --repeats each).
//
// Output: a table, or with --json one JSON line per figure:
//   {"bench":"load","clients":N,"aggregate_tok_s":X,"ttft_p50_ms":X,"ttft_p99_ms":X,
//    "latency_min_ms":X,"latency_max_ms":X}                          (one per run, with "round":r
//                                                                     when --rounds > 1)
//   {"bench":"load_median","clients":N,"rounds":R,"aggregate_tok_s":X,...,"vs_one_client":X}
//   {"bench":"short_chat","condition":"idle"|"under_load","latency_ms":X}
// Links only the client library and common (no libtorch).

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_stats.h"
#include "client/daemon_client.h"
#include "common/socket_path.h"

namespace niels::bench {
namespace {

using client::DaemonClient;
using Clock = std::chrono::steady_clock;
namespace v1 = ::niels::v1;

struct Options {
  std::string socket;
  std::vector<int> clients = {1, 2, 4, 8, 16};
  int prompt_tokens = 128;
  int new_tokens = 96;
  int short_tokens = 8;
  int long_tokens = 400;
  int repeats = 3;
  int rounds = 1;
  bool short_chat = true;
  bool json = false;
};


double Median(std::vector<double> values) { return Quantile(std::move(values), 0.5); }

[[noreturn]] void Fail(const std::string& what, const common::Status& status) {
  std::fprintf(stderr, "nielsd-load-bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

std::unique_ptr<DaemonClient> Connect(const std::string& socket) {
  auto connected = DaemonClient::Connect(socket);
  if (!connected.ok()) Fail("connect", connected.status());
  return std::move(connected).value();
}

std::string NewSession(DaemonClient& client) {
  auto created = client.CreateSession(std::nullopt);
  if (!created.ok()) Fail("CreateSession", created.status());
  return created->session_id();
}

// What the daemon's model looks like (ids for the random prompts, eot to ban; -1: the model has none).
struct ModelFacts {
  int64_t vocab = 0;
  int32_t eot = 0;
};

struct RequestTiming {
  double ttft_ms = 0;
  double latency_ms = 0;
  int64_t tokens = 0;
};

// One streamed Generate of `new_tokens` ids after `prompt` on `session`, timed from the call.
RequestTiming TimedGenerate(DaemonClient& client, const std::string& session, const std::vector<int32_t>& prompt,
                            int new_tokens, const ModelFacts& facts, uint64_t seed) {
  v1::GenerateRequest request;
  request.set_session_id(session);
  request.mutable_input_ids()->Add(prompt.begin(), prompt.end());
  request.set_max_new_tokens(new_tokens);
  request.set_stream(true);
  request.mutable_sampling()->set_seed(seed);
  // Every request runs to max_new_tokens (a model without an eot id (-1) stops on nothing else).
  if (facts.eot >= 0) request.mutable_sampling()->add_banned_ids(facts.eot);
  const Clock::time_point start = Clock::now();
  Clock::time_point first{};
  auto result = client.Generate(request, [&](const v1::TokenEvent&) {
    if (first == Clock::time_point{}) first = Clock::now();
  });
  const Clock::time_point end = Clock::now();
  if (!result.ok()) Fail("Generate", result.status());
  return {Ms(first - start), Ms(end - start), result->new_ids_size()};
}

std::vector<int32_t> RandomPrompt(int n, int64_t vocab, int32_t eot, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids;
  while (static_cast<int>(ids.size()) < n) {
    const int32_t id = pick(rng);
    if (id != eot) ids.push_back(id);
  }
  return ids;
}

struct LoadFigures {
  int clients = 0;
  double aggregate_tok_s = 0, ttft_p50_ms = 0, ttft_p99_ms = 0, latency_min_ms = 0, latency_max_ms = 0;
};

// N clients, each with its own connection and session, start their Generate together.
LoadFigures RunLoad(const Options& o, const ModelFacts& facts, int n, int round) {
  std::vector<std::unique_ptr<DaemonClient>> clients;
  std::vector<std::string> sessions;
  for (int c = 0; c < n; ++c) {
    clients.push_back(Connect(o.socket));
    sessions.push_back(NewSession(*clients.back()));
  }
  std::vector<RequestTiming> timings(n);
  std::barrier start_line(n + 1);
  std::vector<std::thread> threads;
  for (int c = 0; c < n; ++c) {
    threads.emplace_back([&, c] {
      const uint32_t seed = 100 + static_cast<uint32_t>(c) + 1000u * static_cast<uint32_t>(n) +
                            1000000u * static_cast<uint32_t>(round);
      const std::vector<int32_t> prompt = RandomPrompt(o.prompt_tokens, facts.vocab, facts.eot, seed);
      start_line.arrive_and_wait();
      timings[c] = TimedGenerate(*clients[c], sessions[c], prompt, o.new_tokens, facts, 1 + c);
    });
  }
  start_line.arrive_and_wait();
  const Clock::time_point start = Clock::now();
  for (std::thread& t : threads) t.join();
  const double wall_ms = Ms(Clock::now() - start);
  for (int c = 0; c < n; ++c) (void)clients[c]->DeleteSession(sessions[c]);

  LoadFigures f;
  f.clients = n;
  std::vector<double> ttft, latency;
  int64_t tokens = 0;
  for (const RequestTiming& t : timings) {
    ttft.push_back(t.ttft_ms);
    latency.push_back(t.latency_ms);
    tokens += t.tokens;
  }
  f.aggregate_tok_s = static_cast<double>(tokens) / (wall_ms / 1000.0);
  f.ttft_p50_ms = Quantile(ttft, 0.5);
  f.ttft_p99_ms = Quantile(ttft, 0.99);
  f.latency_min_ms = *std::min_element(latency.begin(), latency.end());
  f.latency_max_ms = *std::max_element(latency.begin(), latency.end());
  return f;
}

// One Chat of `tokens` tokens (eot banned) on a fresh session; milliseconds from call to reply.
double TimedShortChat(DaemonClient& client, int tokens, const ModelFacts& facts) {
  const std::string session = NewSession(client);
  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_user_text("hello, who are you?");
  request.set_max_new_tokens(tokens);
  request.mutable_sampling()->set_seed(7);
  if (facts.eot >= 0) request.mutable_sampling()->add_banned_ids(facts.eot);
  const Clock::time_point start = Clock::now();
  auto reply = client.Chat(request);
  const double ms = Ms(Clock::now() - start);
  if (!reply.ok()) Fail("Chat", reply.status());
  (void)client.DeleteSession(session);
  return ms;
}

// The prompt of the generation that runs beside the short chat (short, so that --long-tokens can be
// most of the context).
constexpr int kLongPromptTokens = 16;

struct ShortChatFigures {
  double idle_ms = 0, under_load_ms = 0;
  bool load_outlasted = true;  // the long generation was still running after every short chat
};

ShortChatFigures RunShortChat(const Options& o, const ModelFacts& facts) {
  ShortChatFigures f;
  auto chat = Connect(o.socket);
  std::vector<double> idle, loaded;
  for (int r = 0; r < o.repeats; ++r) idle.push_back(TimedShortChat(*chat, o.short_tokens, facts));
  for (int r = 0; r < o.repeats; ++r) {
    auto loader = Connect(o.socket);
    const std::string session = NewSession(*loader);
    std::atomic<bool> generating{false}, finished{false};
    std::thread long_run([&] {
      v1::GenerateRequest request;
      request.set_session_id(session);
      const std::vector<int32_t> prompt = RandomPrompt(kLongPromptTokens, facts.vocab, facts.eot, 999);
      request.mutable_input_ids()->Add(prompt.begin(), prompt.end());
      request.set_max_new_tokens(o.long_tokens);
      request.set_stream(true);
      request.mutable_sampling()->add_banned_ids(facts.eot);
      auto result = loader->Generate(request, [&](const v1::TokenEvent&) { generating = true; });
      if (!result.ok()) Fail("long Generate", result.status());
      finished = true;
    });
    while (!generating.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    loaded.push_back(TimedShortChat(*chat, o.short_tokens, facts));
    if (finished.load()) f.load_outlasted = false;
    long_run.join();
    (void)loader->DeleteSession(session);
  }
  f.idle_ms = Median(idle);
  f.under_load_ms = Median(loaded);
  return f;
}

// Per figure, the median over runs of the same N.
LoadFigures MedianFigures(const std::vector<LoadFigures>& runs) {
  auto median = [&](double LoadFigures::*field) {
    std::vector<double> values;
    for (const LoadFigures& f : runs) values.push_back(f.*field);
    return Median(values);
  };
  LoadFigures m;
  m.clients = runs.front().clients;
  m.aggregate_tok_s = median(&LoadFigures::aggregate_tok_s);
  m.ttft_p50_ms = median(&LoadFigures::ttft_p50_ms);
  m.ttft_p99_ms = median(&LoadFigures::ttft_p99_ms);
  m.latency_min_ms = median(&LoadFigures::latency_min_ms);
  m.latency_max_ms = median(&LoadFigures::latency_max_ms);
  return m;
}

// One row of the load table (or JSON line): `round` for a run of several rounds, `vs_one` for a
// median row when one client was measured too.
void PrintLoad(const Options& o, const char* kind, const LoadFigures& f, std::optional<int> round,
               std::optional<double> vs_one) {
  if (o.json) {
    std::printf("{\"bench\":\"%s\",\"clients\":%d,", kind, f.clients);
    if (round) std::printf("\"round\":%d,", *round);
    if (std::string_view(kind) == "load_median") std::printf("\"rounds\":%d,", o.rounds);
    std::printf("\"aggregate_tok_s\":%.3f,\"ttft_p50_ms\":%.3f,\"ttft_p99_ms\":%.3f,\"latency_min_ms\":%.3f,"
                "\"latency_max_ms\":%.3f",
                f.aggregate_tok_s, f.ttft_p50_ms, f.ttft_p99_ms, f.latency_min_ms, f.latency_max_ms);
    if (vs_one) std::printf(",\"vs_one_client\":%.3f", *vs_one);
    std::printf("}\n");
  } else {
    std::printf("%7d %12.1f %8.1f ms %7.1f ms %7.1f ms %7.1f ms", f.clients, f.aggregate_tok_s, f.ttft_p50_ms,
                f.ttft_p99_ms, f.latency_min_ms, f.latency_max_ms);
    if (vs_one) std::printf("   %.2fx one client", *vs_one);
    std::printf("\n");
  }
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"nielsd-load-bench: concurrent clients and short-chat latency against a running nielsd"};
  app.add_option("--socket", o.socket, "nielsd's socket (default: $NIELSD_SOCKET, then the per-user path)");
  app.add_option("--clients", o.clients, "client counts to run, e.g. --clients 1 2 4 8 16")->capture_default_str();
  app.add_option("--prompt-tokens", o.prompt_tokens, "random input ids per load request")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--new-tokens", o.new_tokens, "tokens generated per load request")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--short-tokens", o.short_tokens, "tokens of the short chat")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--long-tokens", o.long_tokens, "tokens of the generation running beside the short chat")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--repeats", o.repeats, "short chats per condition (median)")->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "times the client counts run in turn (then medians per N)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  app.add_flag("--json", o.json, "one JSON line per figure");
  app.add_flag("!--no-short-chat", o.short_chat, "only the load table (skip the short-chat latencies)");
  CLI11_PARSE(app, argc, argv);
  for (int n : o.clients) {
    if (n < 1 || n > 256) {
      std::fprintf(stderr, "nielsd-load-bench: --clients values must be in [1, 256]\n");
      return 2;
    }
  }
  if (o.socket.empty()) {
    auto path = common::ResolveSocketPath("", common::SocketEnv::FromProcess());
    if (!path.ok()) Fail("socket path", path.status());
    o.socket = *path;
  }

  auto probe = Connect(o.socket);
  auto info = probe->Info();
  if (!info.ok()) Fail("Info", info.status());
  const ModelFacts facts{info->vocab_size(), info->eot_id()};
  if (o.prompt_tokens + o.new_tokens > info->context() || kLongPromptTokens + o.long_tokens > info->context()) {
    std::fprintf(stderr,
                 "nielsd-load-bench: prompt + new tokens (%d + %d, and %d + %d for the long generation) exceed the "
                 "model's context %lld\n",
                 o.prompt_tokens, o.new_tokens, kLongPromptTokens, o.long_tokens,
                 static_cast<long long>(info->context()));
    return 2;
  }
  if (!o.json) {
    std::printf("nielsd-load-bench: model %s (V %lld T %lld C %lld L %lld), %d-token prompts, %d new tokens\n",
                info->model_name().c_str(), static_cast<long long>(info->vocab_size()),
                static_cast<long long>(info->context()), static_cast<long long>(info->width()),
                static_cast<long long>(info->layers()), o.prompt_tokens, o.new_tokens);
    std::printf("%7s %12s %10s %10s %10s %10s\n", "clients", "agg tok/s", "ttft p50", "ttft p99", "lat min",
                "lat max");
  }
  std::vector<std::vector<LoadFigures>> runs(o.clients.size());  // per --clients entry, per round
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < o.clients.size(); ++i) {
      const LoadFigures f = RunLoad(o, facts, o.clients[i], round);
      runs[i].push_back(f);
      PrintLoad(o, "load", f, o.rounds > 1 ? std::optional<int>(round) : std::nullopt, std::nullopt);
    }
  }
  if (o.rounds > 1) {
    if (!o.json) std::printf("medians over %d rounds:\n", o.rounds);
    std::optional<double> one_client;
    std::vector<LoadFigures> medians;
    for (size_t i = 0; i < o.clients.size(); ++i) {
      medians.push_back(MedianFigures(runs[i]));
      if (o.clients[i] == 1) one_client = medians.back().aggregate_tok_s;
    }
    for (const LoadFigures& m : medians) {
      std::optional<double> ratio;
      if (one_client && *one_client > 0) ratio = m.aggregate_tok_s / *one_client;
      PrintLoad(o, "load_median", m, std::nullopt, ratio);
    }
  }
  if (!o.short_chat) return 0;
  const ShortChatFigures s = RunShortChat(o, facts);
  if (o.json) {
    std::printf("{\"bench\":\"short_chat\",\"condition\":\"idle\",\"latency_ms\":%.3f}\n", s.idle_ms);
    std::printf("{\"bench\":\"short_chat\",\"condition\":\"under_load\",\"latency_ms\":%.3f}\n", s.under_load_ms);
  } else {
    std::printf("short chat (%d tokens), median of %d: idle %.1f ms, while a %d-token generation runs %.1f ms "
                "(%.2fx)\n",
                o.short_tokens, o.repeats, s.idle_ms, o.long_tokens, s.under_load_ms, s.under_load_ms / s.idle_ms);
  }
  if (!s.load_outlasted) {
    std::fprintf(stderr, "nielsd-load-bench: note: the %d-token generation ended before a short chat did; "
                         "raise --long-tokens for a fair under-load figure\n", o.long_tokens);
  }
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) { return niels::bench::Main(argc, argv); }
