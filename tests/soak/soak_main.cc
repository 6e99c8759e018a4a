// nielsd-soak: N clients x M turns against a real nielsd over its socket, then every completed reply
// checked against the same request run alone. See tests/soak/README.md.
//
// Each client is its own process (odd clients switch to a second uid, so two users share the
// daemon), with a chat session and a raw (Generate) session, and runs the turns of its plan
// (soak_plan.h): mixed Chat/Generate, streaming or not, cached or uncached, greedy or sampled with a
// fixed seed, with random cancels, disconnects at random byte offsets and reconnects. It writes
// what it saw to a results file. Meanwhile the parent samples nielsd's RSS. Afterwards the parent
// replays, one client at a time, every turn that took effect on fresh sessions and compares:
//   lost    = a request that was sent whole on an open connection but got no final response
//   crossed = a response carrying a request_id the connection did not send, or a session whose
//             final history differs from the replay's (nielsd's refusal of a connection, on
//             request_id 0, is no response: the call or turn is retried on a new connection)
//   wrong   = a completed reply (ids, or error code) that differs from the replay, or a streamed
//             Chat whose events do not spell out its final reply
// Exit status 0 only when all three are 0 and nielsd's fd count returns to its level before.
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "tests/soak/soak_plan.h"
#include "tests/soak/wire_client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/temp_files.h"

namespace {

namespace fs = std::filesystem;
using niels::soak::Fault;
using niels::soak::TurnSpec;
using niels::soak::WireClient;
using niels::v1::Request;
using niels::v1::Response;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

constexpr Ms kReplyTimeout{120000};

struct Options {
  std::string nielsd;
  std::string model;
  int clients = 16;
  int turns = 10;
  uint64_t seed = 1;
  uint32_t second_uid = 65533;
  std::string socket_group = "nogroup";
  uint64_t kv_budget_mb = 0;  // 0: nielsd's default
  uint64_t nofile = 0;        // 0: unchanged; else nielsd runs with RLIMIT_NOFILE = this
  int threads = 2;
  int max_new_tokens = 40;
  std::vector<std::string> daemon_args;
  std::string keep_dir;       // non-empty: copy the clients' result files and nielsd's log here
};

// ---- what a client saw ----

enum class Status { kCompleted, kCancelled, kNotSent, kDisconnectedApplied, kDisconnectedNotApplied, kLost };
const char* StatusName(Status s) {
  switch (s) {
    case Status::kCompleted: return "completed";
    case Status::kCancelled: return "cancelled";
    case Status::kNotSent: return "not_sent";
    case Status::kDisconnectedApplied: return "disconnected_applied";
    case Status::kDisconnectedNotApplied: return "disconnected_not_applied";
    case Status::kLost: return "lost";
  }
  return "?";
}

struct TurnResult {
  Status status = Status::kLost;
  int error_code = 0;              // of a completed turn's final (0 = a result)
  std::vector<int32_t> ids;        // reply_ids / new_ids of a completed turn
  int64_t latency_us = 0;          // send to final (completed turns)
  bool crossed = false;
  bool stream_mismatch = false;
  std::string note;
};

struct ClientResult {
  std::vector<TurnResult> turns;
  std::vector<int32_t> chat_history, raw_history;  // GetSession token_ids at the end
  std::string fatal;                               // setup failure
  int refusals = 0;                                // connections nielsd refused (then retried)
};

std::string JoinIds(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s.empty() ? "-" : s;
}
std::vector<int32_t> SplitIds(const std::string& s) {
  std::vector<int32_t> ids;
  if (s == "-") return ids;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

void WriteResult(const fs::path& file, const ClientResult& r) {
  std::ofstream out(file);
  if (!r.fatal.empty()) out << "F " << r.fatal << "\n";
  for (const TurnResult& t : r.turns) {
    out << "T " << StatusName(t.status) << " " << t.error_code << " " << t.latency_us << " " << t.crossed << " "
        << t.stream_mismatch << " " << JoinIds(t.ids) << " " << (t.note.empty() ? "-" : t.note) << "\n";
  }
  out << "C " << JoinIds(r.chat_history) << "\nR " << JoinIds(r.raw_history) << "\nN " << r.refusals
      << "\nEND\n";
}

std::optional<ClientResult> ReadResult(const fs::path& file) {
  std::ifstream in(file);
  ClientResult r;
  std::string line;
  bool complete = false;
  while (std::getline(in, line)) {
    std::stringstream s(line);
    std::string tag;
    s >> tag;
    if (tag == "F") {
      std::getline(s, r.fatal);
    } else if (tag == "T") {
      TurnResult t;
      std::string status, ids, note;
      s >> status >> t.error_code >> t.latency_us >> t.crossed >> t.stream_mismatch >> ids >> note;
      for (Status st : {Status::kCompleted, Status::kCancelled, Status::kNotSent, Status::kDisconnectedApplied,
                        Status::kDisconnectedNotApplied, Status::kLost}) {
        if (status == StatusName(st)) t.status = st;
      }
      t.ids = SplitIds(ids);
      r.turns.push_back(t);
    } else if (tag == "C" || tag == "R") {
      std::string ids;
      s >> ids;
      (tag == "C" ? r.chat_history : r.raw_history) = SplitIds(ids);
    } else if (tag == "N") {
      s >> r.refusals;
    } else if (tag == "END") {
      complete = true;
    }
  }
  if (!complete) return std::nullopt;
  return r;
}

// ---- one connection's request/response helpers ----

// How long a client keeps retrying connections that nielsd refuses (over its connection limits or
// out of file descriptors; see WireClient): 20 ms between attempts at first, doubling up to 1 s.
// With a low --nofile, clients wait for others to close a connection, so this is generous.
constexpr Ms kRefusedPatience{600000};

class RefusalBackoff {
 public:
  // Sleeps before the next attempt; false once kRefusedPatience has passed.
  bool Wait() {
    if (Clock::now() - start_ > kRefusedPatience) return false;
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, Ms(1000));
    return true;
  }

 private:
  Clock::time_point start_ = Clock::now();
  Ms delay_{20};
};

class Conversation {
 public:
  Conversation(std::string socket, uint64_t id_base) : socket_(std::move(socket)), next_id_(id_base) {}

  bool Connect() {
    // A daemon out of file descriptors leaves connects pending in its backlog; retry refusals.
    for (int attempt = 0; attempt < 600; ++attempt) {
      if (client_.Connect(socket_)) return true;
      std::this_thread::sleep_for(Ms(100));
    }
    return false;
  }
  WireClient& client() { return client_; }
  uint64_t NextId() { return next_id_++; }
  // Connections nielsd refused so far (each retried).
  int refusals() const { return refusals_; }
  // After a refusal: closes the connection and waits before the next attempt (false: gave up).
  bool RetryAfterRefusal(RefusalBackoff& backoff) {
    client_.Close();
    ++refusals_;
    return backoff.Wait();
  }

  // Sends a request and waits for its final response (no events expected). A refused connection
  // is retried on a new one.
  std::optional<Response> Call(Request request, bool* crossed) {
    RefusalBackoff backoff;
    for (;;) {
      if (!client_.connected() && !Connect()) return std::nullopt;
      request.set_request_id(NextId());
      if (client_.Send(request)) {
        std::optional<Response> response = client_.ReadFinal(request.request_id(), kReplyTimeout, nullptr, crossed);
        if (response) return response;
      }
      if (!client_.refused() || !RetryAfterRefusal(backoff)) {
        client_.Close();  // a broken connection: the next call starts a new one
        return std::nullopt;
      }
    }
  }

 private:
  std::string socket_;
  WireClient client_;
  uint64_t next_id_;
  int refusals_ = 0;
};

std::optional<std::vector<int32_t>> History(Conversation& c, const std::string& session, bool* crossed) {
  Request r;
  r.mutable_get_session()->set_session_id(session);
  std::optional<Response> response = c.Call(r, crossed);
  if (!response || !response->has_get_session()) return std::nullopt;
  const auto& ids = response->get_session().token_ids();
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::optional<std::string> NewSession(Conversation& c, bool with_system, bool* crossed) {
  Request r;
  if (with_system) r.mutable_create_session()->set_system_prompt("you are the soak test's assistant.");
  else r.mutable_create_session();
  std::optional<Response> response = c.Call(r, crossed);
  if (!response || !response->has_create_session()) return std::nullopt;
  return response->create_session().session_id();
}

void ResultIds(const Response& final_response, TurnResult* t) {
  if (final_response.has_error()) {
    t->error_code = final_response.error().code();
  } else if (final_response.has_chat()) {
    t->ids.assign(final_response.chat().reply_ids().begin(), final_response.chat().reply_ids().end());
  } else if (final_response.has_generate()) {
    t->ids.assign(final_response.generate().new_ids().begin(), final_response.generate().new_ids().end());
  }
}

// Runs one turn of the plan on `c` (fault included); the sessions are the client's. When nielsd
// refuses the connection, c.client().refused() is set and nothing of the turn took effect.
TurnResult RunTurnOnce(Conversation& c, const TurnSpec& turn, const std::string& chat_session,
                       const std::string& raw_session) {
  TurnResult t;
  bool crossed = false;
  const std::string& session = turn.chat ? chat_session : raw_session;
  if (turn.reconnect_before) c.client().Close();
  if (!c.client().connected() && !c.Connect()) {
    t.note = "connect_failed";
    return t;
  }
  if (turn.reset_before) {
    Request reset;
    reset.mutable_reset_session()->set_session_id(raw_session);
    std::optional<Response> r = c.Call(reset, &crossed);
    if (!r || !r->has_reset_session()) {
      t.note = "reset_failed";
      t.crossed = crossed;
      return t;
    }
  }
  std::optional<std::vector<int32_t>> before;
  if (turn.fault == Fault::kDisconnectReceive) {
    before = History(c, session, &crossed);
    if (!before) {
      t.note = "history_failed";
      return t;
    }
  }
  const uint64_t id = c.NextId();
  const Request request = niels::soak::MakeRequest(turn, id, session);
  const std::string frame = niels::common::EncodeFrame(request);

  if (turn.fault == Fault::kDisconnectSend) {
    c.client().Write(std::string_view(frame).substr(0, turn.fault_offset % frame.size()));
    c.client().Close();
    t.status = Status::kNotSent;
    return t;
  }
  const auto start = Clock::now();
  if (!c.client().Write(frame)) {
    t.note = "send_failed";
    return t;
  }
  const uint64_t read_base = c.client().bytes_read();
  std::string streamed;
  int events = 0;
  bool cancel_sent = false;
  uint64_t cancel_id = 0;
  if (turn.fault == Fault::kCancel && turn.cancel_after_events == 0) {
    cancel_id = c.NextId();
    Request cancel;
    cancel.set_request_id(cancel_id);
    cancel.mutable_cancel()->set_target_request_id(id);
    cancel_sent = c.client().Send(cancel);
  }
  const uint64_t limit = turn.fault == Fault::kDisconnectReceive ? read_base + turn.fault_offset : UINT64_MAX;
  const auto deadline = start + kReplyTimeout;
  std::optional<Response> final_response;
  bool cancel_answered = !cancel_sent;
  for (;;) {
    const auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now());
    std::optional<Response> r = c.client().Read(std::max(left, Ms(1)), limit);
    if (!r) break;
    if (cancel_sent && r->request_id() == cancel_id && r->has_cancel()) {
      cancel_answered = true;
      if (final_response) break;
      continue;
    }
    if (r->request_id() != id) {
      crossed = true;  // noted for the report: which id, and its error code (-1: not an error)
      t.note += "crossing_id_" + std::to_string(r->request_id()) + "_code_" +
                std::to_string(r->has_error() ? r->error().code() : -1) + "/";
      continue;
    }
    if (r->has_token()) {
      if (r->token().index() != events) t.stream_mismatch = true;
      ++events;
      streamed += r->token().text();
      if (turn.fault == Fault::kCancel && !cancel_sent && events >= turn.cancel_after_events) {
        cancel_id = c.NextId();
        Request cancel;
        cancel.set_request_id(cancel_id);
        cancel.mutable_cancel()->set_target_request_id(id);
        cancel_sent = c.client().Send(cancel);
        cancel_answered = !cancel_sent;
      }
      continue;
    }
    final_response = r;
    if (cancel_answered) break;
  }
  t.crossed = crossed;
  if (final_response) {
    t.latency_us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
    if (final_response->has_error() && final_response->error().code() == niels::v1::CANCELLED && cancel_sent) {
      t.status = Status::kCancelled;
      return t;
    }
    t.status = Status::kCompleted;
    ResultIds(*final_response, &t);
    if (turn.chat && turn.stream && final_response->has_chat() && streamed != final_response->chat().reply()) {
      t.stream_mismatch = true;
    }
    return t;
  }
  if (turn.fault == Fault::kDisconnectReceive && c.client().stopped_at_limit()) {
    // Disconnect mid-response, reconnect, and see whether the request took effect.
    c.client().Close();
    if (!c.Connect()) {
      t.note = "reconnect_failed";
      return t;
    }
    std::optional<std::vector<int32_t>> after = History(c, session, &crossed);
    t.crossed = crossed;
    if (!after) {
      t.note = "history_failed";
      return t;
    }
    t.status = *after == *before ? Status::kDisconnectedNotApplied : Status::kDisconnectedApplied;
    return t;
  }
  t.note += "no_final:" + c.client().error();
  for (char& ch : t.note) if (ch == ' ') ch = '_';
  return t;  // kLost
}

// RunTurnOnce, again on a new connection while nielsd refuses the connection (bounded). A lost
// turn closes the connection, so the next turn starts on a new one.
TurnResult RunTurn(Conversation& c, const TurnSpec& turn, const std::string& chat_session,
                   const std::string& raw_session) {
  RefusalBackoff backoff;
  for (;;) {
    TurnResult t = RunTurnOnce(c, turn, chat_session, raw_session);
    if (!c.client().refused()) {
      if (t.status == Status::kLost) c.client().Close();
      return t;
    }
    if (!c.RetryAfterRefusal(backoff)) {
      t.status = Status::kLost;
      t.note = "refused_for_" + std::to_string(kRefusedPatience.count() / 1000) + "_s";
      return t;
    }
  }
}

ClientResult RunClient(const std::string& socket, const std::vector<TurnSpec>& plan, int client) {
  ClientResult result;
  Conversation c(socket, (static_cast<uint64_t>(client) << 32) + 1000);
  bool crossed = false;
  if (!c.Connect()) {
    result.fatal = "cannot connect";
    return result;
  }
  std::optional<std::string> chat_session = NewSession(c, true, &crossed);
  std::optional<std::string> raw_session = NewSession(c, false, &crossed);
  if (!chat_session || !raw_session) {
    result.fatal = "cannot create sessions: " + c.client().error();
    result.refusals = c.refusals();
    return result;
  }
  for (const TurnSpec& turn : plan) result.turns.push_back(RunTurn(c, turn, *chat_session, *raw_session));
  if (!c.client().connected()) c.Connect();
  auto chat = History(c, *chat_session, &crossed);
  auto raw = History(c, *raw_session, &crossed);
  if (chat) result.chat_history = *chat;
  if (raw) result.raw_history = *raw;
  if (!chat || !raw) result.fatal = "final GetSession failed";
  for (const std::string& s : {*chat_session, *raw_session}) {
    Request del;
    del.mutable_delete_session()->set_session_id(s);
    c.Call(del, &crossed);
  }
  if (crossed && !result.turns.empty()) result.turns.back().crossed = true;
  result.refusals = c.refusals();
  return result;
}

// ---- nielsd observation ----

int64_t RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

int FdCount(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != fs::directory_iterator(); ++it) {
    ++n;
  }
  return n;
}

bool SupportsFlag(const std::string& nielsd, const std::string& flag) {
  niels::testing::ProcessResult help = niels::testing::RunProcess({nielsd, "--help"});
  return help.out.find(flag) != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"nielsd-soak: concurrent clients against a real nielsd; every reply checked against a replay"};
  Options o;
  app.add_option("--nielsd", o.nielsd, "the nielsd binary")->required();
  app.add_option("--model", o.model, "model directory (default: nielsd's shipped model)");
  app.add_option("--clients", o.clients, "client processes")->check(CLI::Range(1, 512));
  app.add_option("--turns", o.turns, "turns per client")->check(CLI::Range(1, 100000));
  app.add_option("--seed", o.seed, "plan seed");
  app.add_option("--second-uid", o.second_uid, "uid of the odd clients (0: all run as the caller)");
  app.add_option("--socket-group", o.socket_group, "group given the socket so the second uid can connect");
  app.add_option("--kv-budget-mb", o.kv_budget_mb, "nielsd --kv-budget-mb (0: default)");
  app.add_option("--nofile", o.nofile, "run nielsd with this RLIMIT_NOFILE (0: unchanged)");
  app.add_option("--threads", o.threads, "nielsd --threads");
  app.add_option("--max-new-tokens", o.max_new_tokens, "longest reply of the plan")->check(CLI::Range(4, 4096));
  app.add_option("--daemon-arg", o.daemon_args, "extra nielsd argument (repeatable)");
  app.add_option("--keep", o.keep_dir, "copy the clients' result files and nielsd's log to this directory");
  CLI11_PARSE(app, argc, argv);

  niels::testing::TempDir dir("nielsd_soak_");
  ::chmod(dir.path().c_str(), 0777);  // the second uid writes its results here and reaches the socket
  const fs::path socket = dir / "nielsd.sock";

  niels::testing::DaemonProcessOptions d;
  d.binary = o.nielsd;
  d.model_dir = o.model;
  d.socket_path = socket;
  d.log_file = dir / "nielsd.log";
  d.timeout = Ms(120000);
  d.extra_args = {"--threads", std::to_string(o.threads), "--max-sessions", std::to_string(4 * o.clients + 16)};
  if (o.second_uid != 0) d.extra_args.insert(d.extra_args.end(), {"--socket-group", o.socket_group});
  if (o.kv_budget_mb > 0) d.extra_args.insert(d.extra_args.end(), {"--kv-budget-mb", std::to_string(o.kv_budget_mb)});
  // Per-uid limits, when this nielsd has them: room for every client of one uid.
  if (SupportsFlag(o.nielsd, "--max-sessions-per-uid")) {
    d.extra_args.insert(d.extra_args.end(), {"--max-sessions-per-uid", std::to_string(2 * o.clients + 8)});
  }
  if (SupportsFlag(o.nielsd, "--max-connections-per-uid")) {
    d.extra_args.insert(d.extra_args.end(), {"--max-connections-per-uid", std::to_string(o.clients + 8)});
  }
  d.extra_args.insert(d.extra_args.end(), o.daemon_args.begin(), o.daemon_args.end());
  if (o.nofile > 0) d.prefix = {"prlimit", "--nofile=" + std::to_string(o.nofile)};
  std::unique_ptr<niels::testing::DaemonProcess> daemon;
  try {
    daemon = niels::testing::DaemonProcess::Start(d);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nielsd-soak: %s\n", e.what());
    return 2;
  }
  // With a prlimit prefix, prlimit execs nielsd, so the pid is nielsd's.
  const pid_t pid = daemon->pid();

  Conversation setup(socket.string(), 1);
  bool crossed_setup = false;
  Request info;
  info.mutable_info();
  std::optional<Response> info_response = setup.Call(info, &crossed_setup);
  if (!info_response || !info_response->has_info()) {
    std::fprintf(stderr, "nielsd-soak: Info failed: %s\n", setup.client().error().c_str());
    return 2;
  }
  const int32_t vocab = static_cast<int32_t>(info_response->info().vocab_size());
  setup.client().Close();
  std::this_thread::sleep_for(Ms(200));
  const int fds_before = FdCount(pid);
  const int64_t rss_start = RssKb(pid);
  std::printf("nielsd-soak: %d clients x %d turns, model %s (V=%d), seed %llu, second uid %u, kv budget %s, nofile %s\n",
              o.clients, o.turns, info_response->info().model_name().c_str(), vocab,
              static_cast<unsigned long long>(o.seed), o.second_uid,
              o.kv_budget_mb ? (std::to_string(o.kv_budget_mb) + " MiB").c_str() : "default",
              o.nofile ? std::to_string(o.nofile).c_str() : "unchanged");
  std::fflush(stdout);

  // Fork the clients.
  const auto soak_start = Clock::now();
  std::vector<pid_t> children;
  const pid_t soak_pid = ::getpid();
  for (int c = 0; c < o.clients; ++c) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (o.second_uid != 0 && c % 2 == 1) {
        struct group* g = ::getgrnam(o.socket_group.c_str());
        const gid_t gid = g ? g->gr_gid : 65534;
        if (::setgroups(1, &gid) != 0 || ::setgid(gid) != 0 || ::setuid(o.second_uid) != 0) {
          std::perror("nielsd-soak: dropping to the second uid");
          ::_exit(3);
        }
      }
      // A client dies with the soak (a killed soak leaves no client running). Set after the uid
      // change, which clears it; a parent already gone is checked after setting.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != soak_pid) ::_exit(4);
      const auto plan = niels::soak::MakePlan(o.seed, c, o.turns, vocab, /*faults=*/true, o.max_new_tokens);
      const ClientResult result = RunClient(socket.string(), plan, c);
      WriteResult(dir / ("client-" + std::to_string(c) + ".txt"), result);
      ::_exit(0);
    }
    children.push_back(child);
  }

  // Sample nielsd's RSS while the clients run.
  std::vector<std::pair<double, int64_t>> rss_samples;  // (seconds since start, kB)
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done.load()) {
      rss_samples.emplace_back(std::chrono::duration<double>(Clock::now() - soak_start).count(), RssKb(pid));
      std::this_thread::sleep_for(Ms(250));
    }
  });
  int failed_children = 0;
  for (pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed_children;
  }
  done = true;
  sampler.join();
  const double soak_seconds = std::chrono::duration<double>(Clock::now() - soak_start).count();

  // fds: every client connection closed; give nielsd a moment to notice.
  int fds_after = FdCount(pid);
  for (int i = 0; i < 50 && fds_after > fds_before; ++i) {
    std::this_thread::sleep_for(Ms(100));
    fds_after = FdCount(pid);
  }

  // Collect and replay.
  int lost = 0, crossed = 0, wrong = 0, completed = 0, cancelled = 0, not_sent = 0, disc_applied = 0,
      disc_not = 0, errors_final = 0, checked = 0, refusals = 0;
  std::vector<int64_t> latencies;
  std::map<std::string, int> notes;
  Conversation replay(socket.string(), 7ull << 56);
  for (int c = 0; c < o.clients; ++c) {
    std::optional<ClientResult> r = ReadResult(dir / ("client-" + std::to_string(c) + ".txt"));
    if (!r || !r->fatal.empty()) {
      std::fprintf(stderr, "client %d: %s\n", c, r ? r->fatal.c_str() : "no complete results file");
      lost += o.turns;
      continue;
    }
    refusals += r->refusals;
    const auto plan = niels::soak::MakePlan(o.seed, c, o.turns, vocab, true, o.max_new_tokens);
    bool replay_crossed = false;
    std::optional<std::string> chat_session = NewSession(replay, true, &replay_crossed);
    std::optional<std::string> raw_session = NewSession(replay, false, &replay_crossed);
    if (!chat_session || !raw_session) {
      std::fprintf(stderr, "replay: cannot create sessions\n");
      return 2;
    }
    for (size_t i = 0; i < plan.size() && i < r->turns.size(); ++i) {
      const TurnSpec& turn = plan[i];
      const TurnResult& seen = r->turns[i];
      if (seen.crossed) ++crossed;
      switch (seen.status) {
        case Status::kCompleted: ++completed; break;
        case Status::kCancelled: ++cancelled; break;
        case Status::kNotSent: ++not_sent; break;
        case Status::kDisconnectedApplied: ++disc_applied; break;
        case Status::kDisconnectedNotApplied: ++disc_not; break;
        case Status::kLost:
          ++lost;
          ++notes[seen.note];
          break;
      }
      if (turn.reset_before) {
        Request reset;
        reset.mutable_reset_session()->set_session_id(*raw_session);
        replay.Call(reset, &replay_crossed);
      }
      const bool took_effect = seen.status == Status::kCompleted || seen.status == Status::kDisconnectedApplied;
      if (!took_effect) continue;
      TurnSpec alone = turn;
      alone.fault = Fault::kNone;
      alone.reconnect_before = false;
      TurnResult expected = RunTurn(replay, alone, *chat_session, *raw_session);
      if (expected.status != Status::kCompleted) {
        std::fprintf(stderr, "replay of client %d turn %zu did not complete (%s)\n", c, i, expected.note.c_str());
        ++wrong;
        continue;
      }
      if (seen.status != Status::kCompleted) continue;
      ++checked;
      if (seen.error_code != 0) ++errors_final;
      if (turn.fault == Fault::kNone) latencies.push_back(seen.latency_us);
      if (seen.ids != expected.ids || seen.error_code != expected.error_code || seen.stream_mismatch) {
        ++wrong;
        std::fprintf(stderr, "WRONG client %d turn %zu (%s): got [%s] code %d%s, alone [%s] code %d\n", c, i,
                     turn.chat ? "chat" : "generate", JoinIds(seen.ids).c_str(), seen.error_code,
                     seen.stream_mismatch ? " (stream != reply)" : "", JoinIds(expected.ids).c_str(),
                     expected.error_code);
      }
    }
    // The sessions' final histories must match the replay's exactly.
    auto chat = History(replay, *chat_session, &replay_crossed);
    auto raw = History(replay, *raw_session, &replay_crossed);
    if (!chat || !raw || *chat != r->chat_history || *raw != r->raw_history) {
      ++crossed;
      std::fprintf(stderr, "CROSSED client %d: final session history differs from the replay\n", c);
    }
    for (const std::string& s : {*chat_session, *raw_session}) {
      Request del;
      del.mutable_delete_session()->set_session_id(s);
      replay.Call(del, &replay_crossed);
    }
    if (replay_crossed) ++crossed;
  }
  replay.client().Close();
  const int64_t rss_end = RssKb(pid);
  const int exit_code = daemon->Stop();

  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    return latencies.empty() ? 0.0 : latencies[std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()))] / 1000.0;
  };
  // RSS over time: the maximum within each tenth of the soak (levels off once warm).
  std::string rss_curve;
  int64_t rss_max = 0;
  for (int tenth = 0; tenth < 10; ++tenth) {
    int64_t m = 0;
    for (const auto& [t, kb] : rss_samples) {
      if (t >= soak_seconds * tenth / 10 && t < soak_seconds * (tenth + 1) / 10) m = std::max(m, kb);
    }
    rss_max = std::max(rss_max, m);
    rss_curve += (tenth ? " " : "") + std::to_string(m / 1024);
  }
  std::printf("turns: %d completed (%d checked against a replay alone, %d of them error finals), %d cancelled, "
              "%d not sent (disconnect mid-request), %d disconnected mid-response (%d took effect)\n",
              completed, checked, errors_final, cancelled, not_sent, disc_applied + disc_not, disc_applied);
  std::printf("lost %d, crossed %d, wrong %d\n", lost, crossed, wrong);
  std::printf("connections nielsd refused (over its limits or out of fds; each retried): %d\n", refusals);
  for (const auto& [note, n] : notes) std::printf("  lost because %s: %d\n", note.c_str(), n);
  std::printf("latency (fault-free completed turns, %zu): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", latencies.size(),
              pct(0.5), pct(0.99), latencies.empty() ? 0.0 : latencies.back() / 1000.0);
  std::printf("nielsd RSS MiB: start %lld, max per tenth of the soak [%s], max %lld, after replay %lld\n",
              static_cast<long long>(rss_start / 1024), rss_curve.c_str(), static_cast<long long>(rss_max / 1024),
              static_cast<long long>(rss_end / 1024));
  std::printf("nielsd fds: before %d, after %d\n", fds_before, fds_after);
  std::printf("soak %.1f s, %d client processes failed, nielsd exit code %d\n", soak_seconds, failed_children,
              exit_code);
  const bool ok = lost == 0 && crossed == 0 && wrong == 0 && failed_children == 0 && fds_after <= fds_before &&
                  exit_code == 0;
  if (!ok) std::printf("nielsd log: %s\n%s\n", d.log_file.c_str(), daemon->log().substr(0, 4000).c_str());
  if (!o.keep_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.keep_dir, ec);
    fs::copy(dir.path(), o.keep_dir, fs::copy_options::overwrite_existing | fs::copy_options::recursive, ec);
    if (ec) std::fprintf(stderr, "nielsd-soak: --keep %s: %s\n", o.keep_dir.c_str(), ec.message().c_str());
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
