#pragma once
// Engine: the real InferenceEngine. It owns the loaded model, every session with its KV cache, and
// ONE engine thread that runs all jobs in FIFO order (so requests on one session are serialised and
// the model is never used from two threads).
//
// Threading: Submit() and Shutdown() are thread-safe; Submit() only enqueues (under a mutex) and
// never waits for model work. Every response is sent through the job's sink from the engine thread,
// except the immediate errors of Submit() itself (UNAVAILABLE after Shutdown, RESOURCE_EXHAUSTED on a
// full queue, INVALID_ARGUMENT for a Cancel or empty request), which are sent on the caller's thread.
//
// Scheduling: one job runs at a time. The next job is chosen round robin over the uids that have
// queued work (each uid's own jobs in submission order), so a user with many queued requests delays
// another user by at most one of their jobs. While a Chat or Generate decodes, queued jobs that need
// no generation (Info, Stats, Tokenize, Detokenize, ListSessions, Create/Get/Fork/Reset/Delete) are
// served between its decode steps. A job never starts before an earlier-submitted job that names the
// same session (as its session, or as a fork's source) has finished: requests on one session always
// run in the order they were submitted, quick or not.
//
// Limits: at most `max_queue` queued jobs in all and `max_queued_per_uid` per uid (RESOURCE_EXHAUSTED
// beyond either); sessions per uid and in all (SessionStore); sessions unused for
// `idle_session_timeout` are deleted (checked about once a second and whenever a job ends).
//
// Request semantics (DESIGN.md sections 4-6; proto/niels/v1/nielsd.proto):
// - A job whose cancel flag is set before it starts is answered CANCELLED without running.
// - Chat and Generate are atomic: on cancel (the job's flag, or the sink's Send returning false) or
//   failure the session is restored exactly (tokens, turns, cache length) and the final response is
//   Error CANCELLED (or the failure's code).
// - Chat context policy: a turn needs its own tokens plus room for the reply, R = min(max_new_tokens,
//   T/4) tokens (at least 1). When history + turn + R > T the oldest complete turns are dropped (the
//   system prompt stays; its cached keys/values are kept, the rest is re-prefilled) until it fits or
//   no turn is left, and the response reports truncated_turns. If even then the history plus the turn
//   leaves no room for a single reply token, INVALID_ARGUMENT and the session is unchanged.
// - A chat reply that ends without eot (max_new_tokens) still closes its turn with an eot in the
//   history (uncached), so the history always reads [asst] reply [eot]; at the context limit the eot is
//   added at the start of the next turn instead.
// - Errors are common::Status values mapped to the wire in common/wire_status.h.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "daemon/engine/inference_engine.h"
#include "daemon/engine/job_queue.h"
#include "daemon/model/model_dir.h"

namespace niels::daemon::engine {

// The default system prompt of the original CLI (DESIGN.md section 8), reported by Info.
inline constexpr std::string_view kDefaultSystemPrompt =
    "you are a tiny chatbot on niels\u2019 website. answer in third person about niels. do not invent "
    "personal facts; if you don\u2019t know, say you don\u2019t know.";

struct EngineOptions {
  uint32_t max_sessions = 1024;           // CreateSession/ForkSession beyond it: RESOURCE_EXHAUSTED
  uint32_t max_sessions_per_uid = 64;     // the same, for the sessions of one uid
  // Sessions unused this long are deleted; zero keeps them until deleted or the daemon stops.
  std::chrono::milliseconds idle_session_timeout = std::chrono::hours(24);
  uint64_t kv_budget_bytes = 1ull << 30;  // all sessions' KV caches; LRU idle caches dropped first
  size_t max_queue = 256;                 // queued jobs beyond it: RESOURCE_EXHAUSTED
  size_t max_queued_per_uid = 64;         // queued jobs of one uid beyond it: RESOURCE_EXHAUSTED
  bool allow_root = false;                // uid 0 may use every session
  std::string default_system_prompt = std::string(kDefaultSystemPrompt);  // reported by Info
  int threads = 0;                        // > 0: model::ConfigureThreads(threads) on the engine
                                          // thread before any work; 0 = leave the defaults
  uint64_t max_frame_bytes = 4u << 20;    // reported by Info (the server enforces it)
};

struct EngineState;  // engine_state.h: what the request handlers work on

class Engine : public InferenceEngine {
 public:
  // Takes ownership of a loaded model and starts the engine thread. REQUIRES: model is complete.
  Engine(std::unique_ptr<model::Model> model, EngineOptions options);
  ~Engine() override;  // Shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void Submit(Job job) override;
  void Shutdown() override;

  const model::Model& model() const;
  const EngineOptions& options() const { return options_; }

 private:
  void Run();
  void Execute(QueuedJob& queued);
  // Deletes idle sessions when a check is due. Engine thread only.
  void ExpireIdleSessions();
  // Runs the queued quick jobs (see Scheduling) that do not name `busy_session`. Engine thread only.
  void ServeBetweenSteps(const std::string& busy_session);

  EngineOptions options_;
  std::unique_ptr<EngineState> state_;  // touched only by the engine thread (after construction)

  std::mutex mutex_;
  std::condition_variable wake_;
  JobQueue queue_;                                  // guarded by mutex_
  bool stopping_ = false;                           // guarded by mutex_
  std::shared_ptr<std::atomic<bool>> running_cancel_;  // guarded by mutex_: the job being run
  std::once_flag shutdown_once_;
  std::thread thread_;
  std::chrono::steady_clock::time_point next_expiry_check_{};  // engine thread only
};

// Loads the model directory and starts an engine on it. Errors are LoadModelDir's (they name the
// file and the key or tensor), so nielsd's main can print them as they are.
common::StatusOr<std::unique_ptr<Engine>> MakeEngine(const std::filesystem::path& model_dir,
                                                     EngineOptions options);

}  // namespace niels::daemon::engine
