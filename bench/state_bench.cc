// nielsd-state-bench: what durable sessions cost (docs/ARCHITECTURE.md, "Durable sessions").
//
// Storage (in this process, the real DurableStore on a temp state directory):
//   commit: --sessions chats of --turns turns each, interleaved, every turn committing the whole
//           history (a system prompt of 40 tokens and --turn-tokens per turn) the way nielsd does
//           after a turn: p50/p99 per commit, with synchronous=NORMAL (the default) and FULL
//           (--sync-commits).
//   open:   DurableStore::Open on a state directory holding 0 and then --stored sessions,
//           alternating (A/B) --repeats times: medians. nielsd opens it once before READY and
//           loads no session until it is used.
// Daemon (with --nielsd BINARY --model DIR):
//   ready:  time from spawning nielsd until it answers Info (state and model loaded), with 0 and
//           with --stored sessions in its state directory, alternating, medians.
//   turn:   a durable and an --ephemeral nielsd side by side; --chats chats of 5 greedy streamed
//           turns (--reply-tokens each), alternating between the two: the client-side time to
//           first token and time to the final response per turn (p50), and their difference,
//           which is what storing each turn adds.
//
// Output: a table, or with --json one JSON line per figure:
//   {"bench":"commit","sync":"normal"|"full","p50_ms":X,"p99_ms":X,"commits":N}
//   {"bench":"open","stored":N,"median_ms":X}
//   {"bench":"ready","stored":N,"median_ms":X}
//   {"bench":"turn","mode":"durable"|"ephemeral","ttft_p50_ms":X,"turn_p50_ms":X,"turns":N}

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench_stats.h"
#include "client/daemon_client.h"
#include "daemon/state/durable_store.h"
#include "daemon/state/model_fingerprint.h"

extern char** environ;

namespace niels::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using daemon::state::DurableStore;
using daemon::state::DurableStoreOptions;
using daemon::state::StoredSession;

struct Options {
  int sessions = 20;
  int turns = 10;
  int turn_tokens = 60;
  int stored = 1000;
  int repeats = 7;
  std::string nielsd;
  std::string model;
  int chats = 20;
  int reply_tokens = 16;
  bool json = false;
};


double Now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

fs::path MakeTempDir() {
  char tmpl[] = "/tmp/nielsd-state-bench-XXXXXX";
  return fs::path(::mkdtemp(tmpl));
}

std::string Id(int i) { return fmt::format("{:032x}", i + 1); }

StoredSession NewSession(int i, const std::string& fingerprint) {
  StoredSession s;
  s.summary.id = Id(i);
  s.summary.owner = 1000 + static_cast<uint32_t>(i % 7);
  s.summary.model_fingerprint = fingerprint;
  s.summary.model_name = "bench";
  s.summary.system_prompt = "you are a benchmark.";
  s.summary.created_unix_s = s.summary.last_used_unix_s = Now();
  s.history.tokens.assign(40, 7);
  s.history.system_end = 40;
  s.summary.length = 40;
  return s;
}

DurableStoreOptions StoreOptions(const fs::path& dir, bool sync) {
  DurableStoreOptions options;
  options.dir = dir;
  options.model_fingerprint = "00000000000000000000000000000000";
  options.model_name = "bench";
  options.sync_commits = sync;
  options.max_stored_sessions_per_uid = 1u << 30;
  return options;
}

// Fills `dir` with `count` sessions of 5 turns each.
void FillStateDir(const fs::path& dir, int count) {
  auto store = DurableStore::Open(StoreOptions(dir, false));
  if (!store.ok()) throw std::runtime_error(store.status().ToString());
  for (int i = 0; i < count; ++i) {
    StoredSession s = NewSession(i, (*store)->options().model_fingerprint);
    for (int t = 0; t < 5; ++t) {
      const auto begin = static_cast<int64_t>(s.history.tokens.size());
      s.history.tokens.insert(s.history.tokens.end(), 60, 9);
      s.history.turns.push_back({begin, static_cast<int64_t>(s.history.tokens.size())});
    }
    s.summary.length = static_cast<int64_t>(s.history.tokens.size());
    s.summary.turn_count = 5;
    if (auto status = (*store)->Create(s, nullptr); !status.ok()) throw std::runtime_error(status.ToString());
  }
}

void BenchCommit(const Options& o, bool sync) {
  const fs::path dir = MakeTempDir();
  std::vector<double> ms;
  {
    auto store = DurableStore::Open(StoreOptions(dir, sync));
    if (!store.ok()) throw std::runtime_error(store.status().ToString());
    std::vector<StoredSession> sessions;
    for (int i = 0; i < o.sessions; ++i) {
      sessions.push_back(NewSession(i, (*store)->options().model_fingerprint));
      if (auto status = (*store)->Create(sessions.back(), nullptr); !status.ok()) throw std::runtime_error(status.ToString());
    }
    for (int t = 0; t < o.turns; ++t) {
      for (StoredSession& s : sessions) {
        const auto begin = static_cast<int64_t>(s.history.tokens.size());
        for (int k = 0; k < o.turn_tokens; ++k) s.history.tokens.push_back((t * 131 + k) % 1000);
        s.history.turns.push_back({begin, static_cast<int64_t>(s.history.tokens.size())});
        const auto start = Clock::now();
        if (auto status = (*store)->Commit(s.summary.id, s.history, Now()); !status.ok()) {
          throw std::runtime_error(status.ToString());
        }
        ms.push_back(Ms(Clock::now() - start));
      }
    }
  }
  fs::remove_all(dir);
  const char* mode = sync ? "full" : "normal";
  if (o.json) {
    std::printf("{\"bench\":\"commit\",\"sync\":\"%s\",\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"commits\":%zu}\n", mode,
                Quantile(ms, 0.5), Quantile(ms, 0.99), ms.size());
  } else {
    std::printf("commit (synchronous=%s): p50 %.3f ms  p99 %.3f ms  over %zu commits\n", mode, Quantile(ms, 0.5),
                Quantile(ms, 0.99), ms.size());
  }
}

// Runs `measure(dir)` alternately on an empty and a filled state directory; prints the medians.
template <typename Measure>
void AlternateEmptyAndFilled(const Options& o, const char* bench, const char* label, Measure measure) {
  const fs::path empty = MakeTempDir();
  const fs::path filled = MakeTempDir();
  FillStateDir(filled, o.stored);
  std::vector<double> empty_ms, filled_ms;
  for (int r = 0; r < o.repeats; ++r) {
    empty_ms.push_back(measure(empty));
    filled_ms.push_back(measure(filled));
  }
  fs::remove_all(empty);
  fs::remove_all(filled);
  for (auto [count, values] : {std::pair{0, &empty_ms}, std::pair{o.stored, &filled_ms}}) {
    if (o.json) {
      std::printf("{\"bench\":\"%s\",\"stored\":%d,\"median_ms\":%.3f}\n", bench, count, Quantile(*values, 0.5));
    } else {
      std::printf("%s with %4d stored sessions: median %.2f ms (%d runs)\n", label, count, Quantile(*values, 0.5),
                  o.repeats);
    }
  }
}

double OpenMs(const fs::path& dir) {
  const auto start = Clock::now();
  auto store = DurableStore::Open(StoreOptions(dir, false));
  const double ms = Ms(Clock::now() - start);
  if (!store.ok()) throw std::runtime_error(store.status().ToString());
  return ms;
}

bool CanConnect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return ok;
}

// A nielsd process on `socket`, stopped (SIGTERM) when destroyed.
class Daemon {
 public:
  Daemon(const Options& o, const std::string& socket, std::vector<std::string> state_args) : socket_(socket) {
    std::vector<std::string> args = {o.nielsd, "--model", o.model, "--socket", socket, "--log-level", "error",
                                     "--threads", "1"};
    args.insert(args.end(), state_args.begin(), state_args.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid_, o.nielsd.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start " + o.nielsd);
    }
  }
  ~Daemon() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  // Waits until nielsd answers Info (the state directory and the model are loaded).
  std::unique_ptr<niels::client::DaemonClient> WaitReady() const {
    const auto start = Clock::now();
    for (;;) {
      if (CanConnect(socket_)) {
        auto client = niels::client::DaemonClient::Connect(socket_);
        if (client.ok() && (*client)->Info().ok()) return std::move(client).value();
      }
      if (Clock::now() - start > std::chrono::seconds(60)) throw std::runtime_error("nielsd did not start");
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }

 private:
  std::string socket_;
  pid_t pid_ = -1;
};

// Spawns nielsd on `state_dir` and returns the milliseconds until it answers Info.
double ReadyMs(const Options& o, const fs::path& state_dir) {
  const auto start = Clock::now();
  Daemon daemon(o, (state_dir / "bench.sock").string(), {"--state-dir", state_dir.string()});
  daemon.WaitReady();
  return Ms(Clock::now() - start);
}

struct TurnTimes {
  std::vector<double> ttft_ms, turn_ms;
};

// One chat of 5 streamed greedy turns on `client`, appending its per-turn times.
void TimedChat(niels::client::DaemonClient& client, int reply_tokens, int chat, TurnTimes& times) {
  auto created = client.CreateSession(std::string("you are a benchmark."));
  if (!created.ok()) throw std::runtime_error(created.status().ToString());
  for (int t = 0; t < 5; ++t) {
    niels::v1::ChatRequest request;
    request.set_session_id(created->session_id());
    request.set_user_text(fmt::format("question {} of chat {}: what is nielsd and how do i start it?", t, chat));
    request.mutable_sampling()->set_temperature(0);
    request.set_max_new_tokens(reply_tokens);
    request.set_stream(true);
    const auto start = Clock::now();
    std::optional<Clock::time_point> first;
    auto reply = client.Chat(request, [&](const niels::v1::TokenEvent&) {
      if (!first) first = Clock::now();
    });
    const auto end = Clock::now();
    if (!reply.ok()) throw std::runtime_error(reply.status().ToString());
    times.ttft_ms.push_back(Ms(first.value_or(end) - start));
    times.turn_ms.push_back(Ms(end - start));
  }
  (void)client.DeleteSession(created->session_id());
}

void BenchTurns(const Options& o) {
  const fs::path dir = MakeTempDir();
  Daemon durable(o, (dir / "durable.sock").string(), {"--state-dir", (dir / "state").string()});
  Daemon ephemeral(o, (dir / "ephemeral.sock").string(), {"--ephemeral"});
  auto durable_client = durable.WaitReady();
  auto ephemeral_client = ephemeral.WaitReady();
  TurnTimes durable_times, ephemeral_times;
  TimedChat(*durable_client, o.reply_tokens, -1, durable_times);  // warm-up, not counted
  TimedChat(*ephemeral_client, o.reply_tokens, -1, ephemeral_times);
  durable_times = {};
  ephemeral_times = {};
  for (int chat = 0; chat < o.chats; ++chat) {
    TimedChat(*durable_client, o.reply_tokens, chat, durable_times);
    TimedChat(*ephemeral_client, o.reply_tokens, chat, ephemeral_times);
  }
  for (auto [mode, times] : {std::pair{"durable", &durable_times}, std::pair{"ephemeral", &ephemeral_times}}) {
    if (o.json) {
      std::printf("{\"bench\":\"turn\",\"mode\":\"%s\",\"ttft_p50_ms\":%.3f,\"turn_p50_ms\":%.3f,\"turns\":%zu}\n",
                  mode, Quantile(times->ttft_ms, 0.5), Quantile(times->turn_ms, 0.5), times->turn_ms.size());
    } else {
      std::printf("turn (%s): time to first token p50 %.2f ms, to the final response p50 %.2f ms (%zu turns)\n",
                  mode, Quantile(times->ttft_ms, 0.5), Quantile(times->turn_ms, 0.5), times->turn_ms.size());
    }
  }
  if (!o.json) {
    std::printf("durable - ephemeral: time to first token %+.2f ms, turn %+.2f ms (p50s)\n",
                Quantile(durable_times.ttft_ms, 0.5) - Quantile(ephemeral_times.ttft_ms, 0.5),
                Quantile(durable_times.turn_ms, 0.5) - Quantile(ephemeral_times.turn_ms, 0.5));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) {
  using namespace niels::bench;
  Options o;
  CLI::App app{"nielsd-state-bench: the cost of durable sessions (commit latency, open and READY time)"};
  app.add_option("--sessions", o.sessions, "concurrent chats in the commit benchmark")->capture_default_str();
  app.add_option("--turns", o.turns, "turns per chat in the commit benchmark")->capture_default_str();
  app.add_option("--turn-tokens", o.turn_tokens, "tokens per turn")->capture_default_str();
  app.add_option("--stored", o.stored, "stored sessions for the open/READY comparison")->capture_default_str();
  app.add_option("--repeats", o.repeats, "A/B rounds of the open/READY comparison")->capture_default_str();
  app.add_option("--nielsd", o.nielsd, "nielsd binary: also measure READY time (needs --model)");
  app.add_option("--model", o.model, "model directory for --nielsd");
  app.add_option("--chats", o.chats, "5-turn chats per daemon in the turn comparison")->capture_default_str();
  app.add_option("--reply-tokens", o.reply_tokens, "tokens per reply in the turn comparison")->capture_default_str();
  app.add_flag("--json", o.json, "one JSON line per figure");
  CLI11_PARSE(app, argc, argv);
  try {
    BenchCommit(o, /*sync=*/false);
    BenchCommit(o, /*sync=*/true);
    AlternateEmptyAndFilled(o, "open", "state open", [](const std::filesystem::path& dir) { return OpenMs(dir); });
    if (!o.nielsd.empty()) {
      AlternateEmptyAndFilled(o, "ready", "nielsd ready",
                              [&](const std::filesystem::path& dir) { return ReadyMs(o, dir); });
      BenchTurns(o);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nielsd-state-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
