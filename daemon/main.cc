// nielsd: flags, wiring, run. Everything else lives in daemon/server (the socket side) and
// daemon/handlers with the engine below it (the model side). See docs/ARCHITECTURE.md "The daemon
// process". Each group of flags becomes its options struct in one function (DaemonOptionsFrom,
// OpenDurableState, EngineOptionsFrom); main() wires them in order.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/log.h"
#include "common/protobuf_log.h"
#include "common/socket_path.h"
#include "daemon/handlers/service.h"
#include "daemon/http/http_front.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/model/config.h"
#include "daemon/kernels/dtype.h"
#include "daemon/kernels/simd_kernels.h"
#include "daemon/server/daemon.h"
#include "daemon/state/durable_store.h"
#include "daemon/state/model_fingerprint.h"
#include "daemon/state/state_dir.h"

namespace {

namespace engine = niels::daemon::engine;
namespace handlers = niels::daemon::handlers;
namespace server = niels::daemon::server;
namespace state = niels::daemon::state;
using niels::common::LogError;
using niels::common::LogInfo;

struct Flags {
  std::string model;
  std::string socket;
  std::string socket_group;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int io_threads = 2;
  uint64_t max_frame_bytes = niels::common::kDefaultMaxFrameBytes;
  uint32_t max_sessions = niels::daemon::sessions::SessionLimits{}.max_sessions;
  uint32_t max_sessions_per_uid = niels::daemon::sessions::SessionLimits{}.max_sessions_per_uid;
  size_t max_queued_per_uid = engine::EngineOptions{}.max_queued_per_uid;
  uint64_t tool_grammar_mb = engine::EngineOptions{}.tool_grammar_bytes >> 20;
  uint64_t tool_grammar_mb_per_uid = engine::EngineOptions{}.tool_grammar_bytes_per_uid >> 20;
  double idle_session_timeout_s =
      std::chrono::duration<double>(engine::EngineOptions{}.idle_session_timeout).count();
  uint64_t kv_budget_mb = engine::EngineOptions{}.kv_budget_bytes >> 20;
  size_t max_connections = server::DaemonOptions{}.max_connections;
  size_t max_connections_per_uid = server::DaemonOptions{}.max_connections_per_uid;
  bool allow_root = false;
  uint32_t max_batch = engine::EngineOptions{}.max_batch;
  uint32_t max_running_per_uid = 0;  // 0: max_batch - 1 (EngineOptions)
  int64_t prefill_chunk = engine::EngineOptions{}.prefill_chunk;
  double context_keep = engine::EngineOptions{}.context_keep;
  std::string log_level = "info";
  // Durable sessions (docs/ARCHITECTURE.md, "Durable sessions").
  std::string state_dir;
  bool ephemeral = false;
  double session_ttl_s = state::DurableStoreOptions{}.session_ttl_s;
  uint64_t kv_disk_budget_mb = state::DurableStoreOptions{}.kv_disk_budget_bytes >> 20;
  uint32_t max_stored_sessions_per_uid = state::DurableStoreOptions{}.max_stored_sessions_per_uid;
  bool sync_commits = false;
  uint64_t max_state_db_mb = 0;
  std::string dtype = "file";
  std::string kv_dtype = "f32";
  int64_t max_context = niels::daemon::loaders::kDefaultMaxContext;
  // The HTTP front (docs/HTTP.md).
  std::string http_socket;
  std::string http_listen;  // loopback TCP, with api_keys
  std::string api_keys;
  std::vector<std::string> http_allow_origins;
  std::vector<std::string> http_allow_hosts;
  uint64_t http_max_header_bytes = niels::daemon::http::HttpOptions{}.max_header_bytes;
  uint64_t http_max_body_bytes = niels::daemon::http::HttpOptions{}.max_body_bytes;
  double http_header_timeout_s = Seconds(niels::daemon::http::HttpOptions{}.header_timeout);
  double http_body_timeout_s = Seconds(niels::daemon::http::HttpOptions{}.body_timeout);
  double http_idle_timeout_s = Seconds(niels::daemon::http::HttpOptions{}.idle_timeout);
  double http_write_timeout_s = Seconds(niels::daemon::http::HttpOptions{}.write_timeout);

  static double Seconds(std::chrono::milliseconds duration) { return std::chrono::duration<double>(duration).count(); }
};

void AddFlags(CLI::App& app, Flags& flags) {
  app.add_option("--model", flags.model,
                 "the model: a niels model directory (config.json, model.safetensors, tokenizer.model), a Hugging "
                 "Face directory (config.json, *.safetensors, tokenizer.json) or a GGUF file; "
                 "default: the shipped demo model");
  app.add_option("--max-context", flags.max_context,
                 "the longest context nielsd runs the model with: the model's own, capped at this many tokens "
                 "(0 = no cap)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  app.add_option("--socket", flags.socket,
                 "socket path; default $NIELSD_SOCKET, then $XDG_RUNTIME_DIR/nielsd/nielsd.sock, "
                 "then /run/nielsd/nielsd.sock");
  app.add_option("--socket-group", flags.socket_group,
                 "give the socket file this group and mode 0660 (default: mode 0600)");
  app.add_option("--threads", flags.threads,
                 "compute threads of the model (prefill, decode and uncached forward kernels; default: cores)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--dtype", flags.dtype,
                 "dtype of the weight matrices in memory: file (as stored in the model's files, used straight from "
                 "their memory mapping), f32, f16 or bf16 (converted at load)")
      ->check(CLI::IsMember({"file", "f32", "f16", "bf16"}))
      ->capture_default_str();
  app.add_option("--kv-dtype", flags.kv_dtype,
                 "element type of the KV cache: f32, or f16 (half the KV memory per token, so --kv-budget-mb holds "
                 "twice the tokens; logprobs move slightly, see the README)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  app.add_option("--io-threads", flags.io_threads, "socket IO threads")->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--max-frame-bytes", flags.max_frame_bytes, "largest accepted request frame")
      ->check(CLI::Range(uint64_t{64}, uint64_t{1} << 30))->capture_default_str();
  app.add_option("--max-sessions", flags.max_sessions, "sessions in memory at once, all users together")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  app.add_option("--max-sessions-per-uid", flags.max_sessions_per_uid, "sessions one user may hold in memory")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  const size_t max_queue = engine::EngineOptions{}.max_queue;
  app.add_option("--max-queued-per-uid", flags.max_queued_per_uid,
                 fmt::format("requests one user may have waiting for the engine (the queue holds {} in all)", max_queue))
      ->check(CLI::Range(size_t{1}, max_queue))->capture_default_str();
  app.add_option("--tool-grammar-mb", flags.tool_grammar_mb,
                 "memory the compiled grammars of the tool sets in use may hold, all users together, MiB")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))->capture_default_str();
  app.add_option("--tool-grammar-mb-per-uid", flags.tool_grammar_mb_per_uid,
                 "memory the compiled grammars of one user's tool sets may hold, MiB")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))->capture_default_str();
  app.add_option("--idle-session-timeout", flags.idle_session_timeout_s,
                 "seconds after which an unused session leaves memory (kept on disk; deleted with --ephemeral); 0 = never")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--kv-budget-mb", flags.kv_budget_mb, "KV cache memory for all sessions, MiB")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24))->capture_default_str();
  app.add_option("--max-connections", flags.max_connections,
                 "open connections at most, all users together (lowered to fit the open-files limit "
                 "unless given explicitly)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))->capture_default_str();
  app.add_option("--max-connections-per-uid", flags.max_connections_per_uid, "open connections one user may hold")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))->capture_default_str();
  app.add_flag("--allow-root", flags.allow_root, "let uid 0 use every user's sessions");
  app.add_option("--max-batch", flags.max_batch, "Chat/Generate requests running at once (rows of a decode step)")
      ->check(CLI::Range(1u, 256u))->capture_default_str();
  app.add_option("--max-running-per-uid", flags.max_running_per_uid,
                 "Chat/Generate requests (and system-prompt prefills) of one user running at once; 0 = "
                 "--max-batch minus 1 (at least 1), so that one row is always left to the other users")
      ->check(CLI::Range(0u, 256u))->capture_default_str();
  app.add_option("--prefill-chunk", flags.prefill_chunk,
                 "prompt tokens prefilled per scheduler iteration, all turns together (long prompts do not stall other streams; 4x for a turn running alone)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  app.add_option("--context-keep", flags.context_keep,
                 "when a chat turn overflows the context, drop the oldest turns until history + turn is at most "
                 "this fraction of the context (the system prompt is always kept)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--log-level", flags.log_level, "error, warn, info or debug")->capture_default_str();
  CLI::Option* state_dir = app.add_option(
      "--state-dir", flags.state_dir,
      "where sessions are kept (default: $STATE_DIRECTORY, then $XDG_STATE_HOME/nielsd, then "
      "~/.local/state/nielsd; created with mode 0700)");
  app.add_flag("--ephemeral", flags.ephemeral, "keep sessions in memory only: a restart loses them")
      ->excludes(state_dir);
  app.add_option("--session-ttl", flags.session_ttl_s,
                 "seconds after which a session nobody used is deleted from disk (default 30 days); 0 = never")
      ->check(CLI::Range(0.0, 1e10))->capture_default_str();
  app.add_option("--kv-disk-budget-mb", flags.kv_disk_budget_mb,
                 "disk space for KV caches of idle sessions evicted from memory, MiB (least recently used go first)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30))->capture_default_str();
  app.add_option("--max-stored-sessions-per-uid", flags.max_stored_sessions_per_uid,
                 "sessions one user keeps on disk; beyond it their least recently used one is deleted")
      ->check(CLI::Range(1u, 1u << 24))->capture_default_str();
  app.add_flag("--sync-commits", flags.sync_commits,
               "fsync every committed turn, so it survives a power loss too (slower: one fsync per turn)");
  app.add_option("--max-state-db-mb", flags.max_state_db_mb,
                 "largest size of the session database, MiB; past it turns fail with RESOURCE_EXHAUSTED (0 = no limit)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30))->capture_default_str();
  app.add_option("--http-socket", flags.http_socket,
                 "also serve the OpenAI-compatible HTTP API and Anthropic's /v1/messages (docs/HTTP.md) on this Unix "
                 "socket: same permissions "
                 "(--socket-group) and per-uid identity as --socket; --max-connections and --max-connections-per-uid "
                 "apply to it separately");
  app.add_option("--http-listen", flags.http_listen,
                 "also serve the HTTP API on this loopback TCP address, 127.0.0.1:PORT or [::1]:PORT (port 0: any "
                 "free one, logged); every request needs a key of --api-keys, and requests a web page could send "
                 "(a Host that is not a loopback name, an Origin header) are refused (docs/HTTP.md)");
  app.add_option("--api-keys", flags.api_keys,
                 "the API keys of --http-listen: a file of KEY NAME lines (NAME: the principal the key stands for, "
                 "an identity of its own); only its owner may have access to it (mode 0600)");
  app.add_option("--http-allow-origin", flags.http_allow_origins,
                 "take --http-listen requests carrying this Origin header (e.g. http://localhost:3000; repeatable)");
  app.add_option("--http-allow-host", flags.http_allow_hosts,
                 "take --http-listen requests whose Host is this name besides localhost and the loopback "
                 "addresses (repeatable)");
  app.add_option("--http-max-header-bytes", flags.http_max_header_bytes,
                 "largest HTTP request head (request line and headers); larger: 431")
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 24))->capture_default_str();
  app.add_option("--http-max-body-bytes", flags.http_max_body_bytes, "largest HTTP request body; larger: 413")
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 30))->capture_default_str();
  app.add_option("--http-header-timeout", flags.http_header_timeout_s,
                 "seconds from a request's first byte to the end of its head; slower connections are closed")
      ->check(CLI::Range(0.001, 3600.0))->capture_default_str();
  app.add_option("--http-body-timeout", flags.http_body_timeout_s,
                 "seconds for a request body to arrive whole; slower: 408 and the connection is closed")
      ->check(CLI::Range(0.001, 3600.0))->capture_default_str();
  app.add_option("--http-idle-timeout", flags.http_idle_timeout_s,
                 "seconds a kept-alive HTTP connection may wait for its next request")
      ->check(CLI::Range(0.001, 86400.0))->capture_default_str();
  app.add_option("--http-write-timeout", flags.http_write_timeout_s,
                 "seconds a client may leave a response or stream event unread before it is cut off (its request "
                 "is cancelled)")
      ->check(CLI::Range(0.001, 3600.0))->capture_default_str();
  app.set_version_flag("--version", std::string("nielsd ") + NIELSD_VERSION);
}

// SIGBUS almost always means a mapped file shrank under us: a model file truncated or rewritten
// in place (the engine checks for that before each generation, but a truncation can land mid-way).
// Say so instead of dying silently. Async-signal-safe: write() and _exit() only.
void OnSigbus(int) {
  static const char kMessage[] =
      "nielsd: SIGBUS: a mapped file was truncated under nielsd, most likely a model file was "
      "rewritten in place; restart nielsd (update models by renaming a new file over the old one)\n";
  (void)!::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  ::_exit(70);
}

// Raises the soft open-files limit to the hard one, and returns how many connections fit in it
// beside the descriptors nielsd needs for itself (model files, logs, the listener: 64 kept spare).
size_t ConnectionsThatFit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return SIZE_MAX;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;  // EPERM under a seccomp filter: keep
  }
  if (limit.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  constexpr rlim_t kSpare = 64;
  return limit.rlim_cur > 2 * kSpare ? static_cast<size_t>(limit.rlim_cur - kSpare)
                                     : static_cast<size_t>(std::max<rlim_t>(1, limit.rlim_cur / 2));
}

// The shipped demo model: next to an installed binary (<prefix>/bin/../share/nielsd/models, so a
// relocated prefix works too), then the configured install prefix, then the source tree's copy.
std::string DefaultModelDir() {
  std::error_code ec;
  std::vector<std::filesystem::path> candidates;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share/nielsd/models/niels-demo");
  candidates.emplace_back(NIELSD_INSTALL_MODEL_DIR);
  candidates.emplace_back(NIELSD_SOURCE_MODEL_DIR);
  for (const std::filesystem::path& dir : candidates) {
    if (std::filesystem::is_regular_file(dir / "config.json", ec)) return dir.lexically_normal().string();
  }
  return "";
}

// The server side of the flags: the socket, its connections and their limits. Lowers
// --max-connections to what the open-files limit allows unless it was given.
server::DaemonOptions DaemonOptionsFrom(const Flags& flags, const std::string& socket_path, bool max_connections_given) {
  server::DaemonOptions options;
  options.listener.socket_path = socket_path;
  if (!flags.socket_group.empty()) options.listener.socket_group = flags.socket_group;
  options.connection.max_frame_bytes = flags.max_frame_bytes;
  options.io_threads = flags.io_threads;
  options.max_connections_per_uid = flags.max_connections_per_uid;
  options.max_connections = flags.max_connections;
  const size_t fit = ConnectionsThatFit();
  if (fit < flags.max_connections) {
    if (!max_connections_given) {
      options.max_connections = fit;
    } else {
      niels::common::LogWarn("--max-connections {} is more than the open-files limit allows (about {}); "
                             "connections past it are refused when descriptors run out",
                             flags.max_connections, fit);
    }
  }
  options.overflow_uid = server::ReadOverflowUid();
  return options;
}

// The HTTP front's options from the flags (its limits beside the protobuf socket's).
niels::daemon::http::HttpOptions HttpOptionsFrom(const Flags& flags, const server::DaemonOptions& daemon) {
  auto millis = [](double seconds) {
    return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000.0)));
  };
  niels::daemon::http::HttpOptions options;
  options.listener.socket_path = flags.http_socket;
  options.listener.socket_group = daemon.listener.socket_group;
  options.max_header_bytes = flags.http_max_header_bytes;
  options.max_body_bytes = flags.http_max_body_bytes;
  options.header_timeout = millis(flags.http_header_timeout_s);
  options.body_timeout = millis(flags.http_body_timeout_s);
  options.idle_timeout = millis(flags.http_idle_timeout_s);
  options.write_timeout = millis(flags.http_write_timeout_s);
  options.max_queued_bytes = daemon.connection.max_queued_bytes;
  options.max_connections = daemon.max_connections;
  options.max_connections_per_uid = daemon.max_connections_per_uid;
  options.overflow_uid = daemon.overflow_uid;
  return options;
}

std::string Lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// The loopback TCP listener's options from --http-listen, --api-keys and --http-allow-*; nullopt
// without --http-listen. INVALID_ARGUMENT for a listen address that is not loopback, for one
// without --api-keys (or those flags without it), and for the key file's problems (ApiKeys::Load).
niels::common::StatusOr<std::optional<niels::daemon::http::TcpListenOptions>> TcpListenFrom(const Flags& flags) {
  using niels::common::Status;
  if (flags.http_listen.empty()) {
    if (!flags.api_keys.empty() || !flags.http_allow_origins.empty() || !flags.http_allow_hosts.empty()) {
      return Status::InvalidArgument(
          "--api-keys, --http-allow-origin and --http-allow-host are for --http-listen, which is not given");
    }
    return std::optional<niels::daemon::http::TcpListenOptions>();
  }
  niels::common::StatusOr<boost::asio::ip::tcp::endpoint> endpoint =
      niels::daemon::http::ParseLoopbackEndpoint(flags.http_listen);
  if (!endpoint.ok()) return endpoint.status();
  if (flags.api_keys.empty()) {
    return Status::InvalidArgument(fmt::format(
        "--http-listen {} needs --api-keys FILE: on TCP every local program can connect, so each request must "
        "carry a key",
        flags.http_listen));
  }
  niels::common::StatusOr<niels::daemon::http::ApiKeys> keys = niels::daemon::http::ApiKeys::Load(flags.api_keys);
  if (!keys.ok()) return keys.status();
  niels::daemon::http::TcpListenOptions tcp;
  tcp.endpoint = *endpoint;
  tcp.keys = std::make_shared<const niels::daemon::http::ApiKeys>(std::move(keys).value());
  for (const std::string& origin : flags.http_allow_origins) {
    if (origin.empty() || origin.find_first_of(" \t\r\n") != std::string::npos) {
      return Status::InvalidArgument(fmt::format("--http-allow-origin '{}': not an origin (http://HOST:PORT)", origin));
    }
    tcp.host_origin.allowed_origins.push_back(Lowercase(origin));
  }
  for (const std::string& host : flags.http_allow_hosts) {
    if (host.empty() || host.find_first_of(" \t\r\n:") != std::string::npos) {
      return Status::InvalidArgument(fmt::format("--http-allow-host '{}': not a host name (without a port)", host));
    }
    tcp.host_origin.allowed_hosts.push_back(Lowercase(host));
  }
  return std::optional<niels::daemon::http::TcpListenOptions>(std::move(tcp));
}

// Durable sessions: the state directory (locked: one daemon per directory), the session database
// and the KV spill files, bound to this model's fingerprint. Sessions are loaded lazily, so opening
// costs the same with a thousand stored sessions as with none.
struct DurableState {
  std::optional<state::StateDirLock> lock;
  std::unique_ptr<state::DurableStore> store;
};

niels::common::StatusOr<DurableState> OpenDurableState(const Flags& flags) {
  niels::common::StatusOr<std::filesystem::path> dir = state::ResolveStateDir(flags.state_dir);
  NIELS_RETURN_IF_ERROR(dir.ok() ? state::PrepareStateDir(*dir) : dir.status());
  auto lock = state::StateDirLock::Acquire(*dir);
  if (!lock.ok()) return lock.status();
  DurableState durable;
  durable.lock.emplace(std::move(lock).value());
  auto source = niels::daemon::loaders::FindModelSource(flags.model);
  if (!source.ok()) return source.status();
  auto fingerprint = state::ModelFingerprint(source->files);
  if (!fingerprint.ok()) return fingerprint.status();
  state::DurableStoreOptions options;
  options.dir = *dir;
  options.model_fingerprint = *fingerprint;
  options.model_name = source->name;
  options.sync_commits = flags.sync_commits;
  options.max_db_bytes = flags.max_state_db_mb << 20;
  options.kv_disk_budget_bytes = flags.kv_disk_budget_mb << 20;
  options.session_ttl_s = flags.session_ttl_s;
  options.max_stored_sessions_per_uid = flags.max_stored_sessions_per_uid;
  auto opened = state::DurableStore::Open(options);
  if (!opened.ok()) return opened.status();
  durable.store = std::move(opened).value();
  return durable;
}

// The engine side of the flags. `durable` may be null (--ephemeral).
engine::EngineOptions EngineOptionsFrom(const Flags& flags, state::DurableStore* durable) {
  engine::EngineOptions options;
  options.durable = durable;
  options.session_limits = {.max_sessions = flags.max_sessions,
                            .max_sessions_per_uid = flags.max_sessions_per_uid,
                            .allow_root = flags.allow_root};
  options.max_queued_per_uid = flags.max_queued_per_uid;
  options.tool_grammar_bytes = flags.tool_grammar_mb << 20;
  options.tool_grammar_bytes_per_uid = flags.tool_grammar_mb_per_uid << 20;
  options.idle_session_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.idle_session_timeout_s * 1000.0));
  options.kv_budget_bytes = flags.kv_budget_mb << 20;
  options.threads = flags.threads;
  options.max_batch = flags.max_batch;
  options.max_running_per_uid = flags.max_running_per_uid;
  options.prefill_chunk = flags.prefill_chunk;
  options.context_keep = flags.context_keep;
  if (flags.dtype != "file") options.model_options.dtype = niels::daemon::kernels::ParseDtype(flags.dtype);
  options.model_options.kv_dtype = *niels::daemon::kernels::ParseDtype(flags.kv_dtype);
  options.model_options.max_context = flags.max_context;
  return options;
}

// Two lines saying what was loaded and how nielsd runs it.
void LogStartup(const Flags& flags, const handlers::Service& service, const server::Daemon& daemon,
                const server::DaemonOptions& options) {
  const auto& model = service.model();
  const auto& config = model.config;
  const auto& weights = model.transformer->weights();
  LogInfo("model {} ({}, {}): {} V={} T={}{} C={} L={} H={} KV={} D={} d_ff={}, {} KV bytes per token; weights "
          "{:.1f} MB ({:.1f} MB used straight from the files' mappings), token embedding {}",
          config.name.empty() ? "unnamed" : config.name, flags.model,
          niels::daemon::loaders::ModelFormatName(model.format),
          niels::daemon::model::ArchitectureName(config.architecture), config.vocab_size, config.context,
          model.model_context > config.context ? fmt::format(" (of {}, --max-context)", model.model_context) : "",
          config.width, config.layers, config.heads, config.kv_head_count(), config.head_dim(), config.d_ff,
          niels::daemon::loaders::KvBytesPerToken(config, *niels::daemon::kernels::ParseDtype(flags.kv_dtype)),
          static_cast<double>(weights.bytes()) / 1e6,
          static_cast<double>(niels::daemon::loaders::MappedWeightBytes(model)) / 1e6,
          niels::daemon::kernels::DtypeName(weights.dtype()));
  // docs/ARCHITECTURE.md "Threads and ownership".
  LogInfo("socket {}, compute threads {} ({} kernels), "
          "{} IO threads, max frame {} bytes, max sessions {} ({} per uid), KV budget {} MiB of {} blocks, "
          "max connections {} ({} per uid)",
          daemon.socket_path(), flags.threads, niels::daemon::kernels::simd::Name(), flags.io_threads,
          flags.max_frame_bytes, flags.max_sessions, flags.max_sessions_per_uid, flags.kv_budget_mb, flags.kv_dtype,
          options.max_connections, options.max_connections_per_uid);
}

// Signals for the whole process: SIGBUS says what happened; SIGPIPE is ignored (a write to a socket
// or pipe whose reader is gone -- stderr piped into a program that exited, a client that disconnected
// -- fails with EPIPE instead of killing nielsd; sockets are written with MSG_NOSIGNAL anyway).
void InstallSignalHandlers() {
  struct sigaction on_sigbus {};
  on_sigbus.sa_handler = OnSigbus;
  ::sigaction(SIGBUS, &on_sigbus, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

int main(int argc, char** argv) {
  InstallSignalHandlers();
  // libprotobuf's own messages about hostile requests go through nielsd's rate-limited logger.
  niels::common::RouteProtobufLogs();

  CLI::App app{"nielsd: local inference daemon for niels_gpt-family language models"};
  Flags flags;
  AddFlags(app, flags);
  CLI11_PARSE(app, argc, argv);

  niels::common::StatusOr<niels::common::LogLevel> level = niels::common::ParseLogLevel(flags.log_level);
  if (!level.ok()) {
    LogError("nielsd: --log-level: {}", level.status().message());
    return 1;
  }
  niels::common::SetLogLevel(*level);

  niels::common::StatusOr<std::optional<niels::daemon::http::TcpListenOptions>> tcp_listen = TcpListenFrom(flags);
  if (!tcp_listen.ok()) {
    LogError("nielsd: {}", tcp_listen.status().message());
    return 1;
  }

  if (flags.model.empty()) flags.model = DefaultModelDir();
  if (flags.model.empty()) {
    LogError("nielsd: --model PATH is required (the shipped demo model was not found in {} or {})",
             NIELSD_INSTALL_MODEL_DIR, NIELSD_SOURCE_MODEL_DIR);
    return 1;
  }
  niels::common::StatusOr<std::string> socket_path =
      niels::common::ResolveSocketPath(flags.socket, niels::common::SocketEnv::FromProcess());
  if (!socket_path.ok()) {
    LogError("nielsd: {}", socket_path.status().message());
    return 1;
  }

  const server::DaemonOptions options = DaemonOptionsFrom(flags, *socket_path, app.count("--max-connections") > 0);
  server::Daemon daemon(options);
  // Bind first: a second nielsd on a live socket refuses before spending time on the model.
  niels::common::Status listening = daemon.Listen();
  if (!listening.ok()) {
    LogError("nielsd: {}", listening.message());
    return 1;
  }

  if (!flags.http_socket.empty()) {
    auto front = niels::daemon::http::HttpFront::Open(daemon.io_context(), HttpOptionsFrom(flags, options));
    if (!front.ok()) {
      LogError("nielsd: --http-socket: {}", front.status().message());
      return 1;
    }
    daemon.AddFront(std::move(front).value());
  }
  if (tcp_listen->has_value()) {
    niels::daemon::http::HttpOptions http = HttpOptionsFrom(flags, options);
    http.tcp = std::move(**tcp_listen);
    auto front = niels::daemon::http::HttpFront::OpenTcp(daemon.io_context(), std::move(http));
    if (!front.ok()) {
      LogError("nielsd: --http-listen: {}", front.status().message());
      return 1;
    }
    daemon.AddFront(std::move(front).value());
  }

  DurableState durable;
  if (!flags.ephemeral) {
    niels::common::StatusOr<DurableState> opened = OpenDurableState(flags);
    if (!opened.ok()) {
      LogError("nielsd: {}", opened.status().message());
      return 1;
    }
    durable = std::move(opened).value();
    LogInfo("sessions are kept in {}", durable.store->db_path().string());
  } else {
    LogInfo("--ephemeral: sessions are kept in memory only");
  }

  LogInfo("nielsd {}: loading model {}", NIELSD_VERSION, flags.model);
  niels::common::StatusOr<std::unique_ptr<handlers::Service>> loaded =
      handlers::MakeService(flags.model, EngineOptionsFrom(flags, durable.store.get()));
  if (!loaded.ok()) {
    LogError("nielsd: {}", loaded.status().message());
    return 1;
  }
  std::unique_ptr<handlers::Service> inference = std::move(loaded).value();
  LogStartup(flags, *inference, daemon, options);
  int code = daemon.Serve(*inference);
  inference.reset();
  return code;
}
