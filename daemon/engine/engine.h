#pragma once
// Engine: the real InferenceEngine. It owns the loaded model, every session with its KV cache, and
// ONE engine thread that runs the scheduler below (so the model is never used from two threads).
//
// Threading: Submit() and Shutdown() are thread-safe; Submit() only enqueues (under a mutex) and
// never waits for model work. Every response is sent through the job's sink from the engine thread,
// except the immediate errors of Submit() itself (UNAVAILABLE after Shutdown, RESOURCE_EXHAUSTED on a
// full queue, INVALID_ARGUMENT for a Cancel or empty request), which are sent on the caller's thread.
//
// Scheduling (iteration-level, continuous batching; docs/ARCHITECTURE.md, "Engine: scheduling and
// batching"). Every Chat/Generate is a Turn. The engine thread loops over iterations:
//  1. Submitted jobs join the waiting list. A waiting job whose cancel flag is set is answered
//     CANCELLED at once, wherever it is in the list.
//  2. Waiting jobs are taken in submission order, except that a job naming a session waits while
//     that session has a running turn or an earlier waiting job (per-session order; a turn is
//     atomic). Quick jobs (Info, Stats, Tokenize, Detokenize, session operations) are answered
//     right there, never waiting for any generation. A generating job is admitted as a running
//     Turn when fewer than max_batch turns run and the KV budget can hold what it may grow to
//     (SessionStore::Admit); otherwise it waits (or fails with RESOURCE_EXHAUSTED when it alone
//     exceeds the budget).
//  3. Model work, one piece per kind: the next prefill chunk (prefill_chunk tokens) of one
//     prefilling turn, one step of one uncached turn (round robin among each), and ONE batched
//     decode step for every decoding cached turn, each sampled with its own sampler.
//  4. Finished turns (stop rule, cancel, disconnect) are committed or restored and answered.
// A cancelled running turn therefore stops within one iteration. Equal requests started together
// decode in the same steps and finish together; nothing starves (round robin over prefills and
// uncached steps, every decoding turn in every step).
//  2a. Fairness between users: the waiting list is taken round robin over the uids that have
//     waiting requests (each uid's own requests in submission order), starting after the uid
//     admitted last, so a user with many queued requests delays another user's by at most one
//     admission.
//
// Limits: at most `max_queue` queued jobs in all and `max_queued_per_uid` per uid (RESOURCE_EXHAUSTED
// beyond either); sessions per uid and in all (SessionStore); sessions unused for
// `idle_session_timeout` are deleted (checked about once a second and between iterations; a session
// with a running turn never expires).
//
// Request semantics (proto/PROTOCOL.md; proto/niels/v1/nielsd.proto):
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
#include <deque>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/frame.h"
#include "common/status.h"
#include "daemon/engine/inference_engine.h"
#include "daemon/model/model_dir.h"

namespace niels::daemon::engine {

// The default system prompt of the original CLI, reported by Info.
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
  int threads = 0;                        // the model kernels' WorkerPool (MakeEngine); > 0 also
                                          // model::ConfigureThreads() on the engine thread
  // How the model is kept in memory (nielsd --dtype, --kv-dtype; MakeEngine).
  model::ModelDirOptions model_options;
  uint64_t max_frame_bytes = common::kDefaultMaxFrameBytes;  // reported by Info (the server enforces it)
  uint32_t max_batch = 16;                // running turns (rows of a batched decode step) at most
  int64_t prefill_chunk = 256;            // prompt tokens prefilled per iteration per turn
};

struct EngineState;  // engine_state.h: what the request handlers work on
struct RunningTurn;  // engine.cc: an admitted Turn with its job

// A job waiting for the engine thread.
struct QueuedJob {
  Job job;
  std::chrono::steady_clock::time_point enqueued;
};

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
  // The steps of one iteration (see Scheduling); engine thread only.
  void AnswerCancelledWaiting();
  void ServeWaiting();
  void RunModelWork();
  void RetireFinished();
  // Runs a quick job now and sends its final response.
  void ExecuteQuick(QueuedJob& queued);
  // Tries to admit a generating job: true when it was answered or admitted (it leaves the waiting
  // list), false when it must wait.
  bool TryAdmit(QueuedJob& queued);
  void UpdateFigures();
  // Sends the final error of a job the engine thread held / forgets its cancel flag.
  void FinishWithError(const Job& job, const common::Status& status);
  void Release(const Job& job);
  // Deletes idle sessions when a check is due. Engine thread only.
  void ExpireIdleSessions();
  // Removes a job from waiting_ (and from the per-uid counts).
  void Unwait(std::list<QueuedJob>::iterator it);
  // Jobs of `uid` submitted and not yet started. REQUIRES: mutex_ held.
  size_t QueuedFor(uint32_t uid) const;

  EngineOptions options_;
  std::unique_ptr<EngineState> state_;  // touched only by the engine thread (after construction)

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<QueuedJob> queue_;  // guarded by mutex_: submitted, not yet seen by the engine thread
  bool stopping_ = false;        // guarded by mutex_
  // Guarded by mutex_: the cancel flags of the jobs the engine thread holds (waiting or running),
  // so that Shutdown can flag them even while the engine thread is busy.
  std::set<std::shared_ptr<std::atomic<bool>>> held_cancels_;
  // Engine thread only:
  std::list<QueuedJob> waiting_;                       // seen, not yet admitted or answered
  std::vector<std::unique_ptr<RunningTurn>> running_;  // admitted turns, in admission order
  size_t next_prefill_ = 0;   // round-robin positions among prefilling / uncached turns
  size_t next_uncached_ = 0;
  std::optional<uint32_t> last_admitted_uid_;  // where the uid round robin resumes
  // Guarded by mutex_: jobs in waiting_ (for Submit's queue limits), in all and per uid.
  size_t waiting_count_ = 0;
  std::map<uint32_t, size_t> waiting_per_uid_;
  std::once_flag shutdown_once_;
  std::thread thread_;
  std::chrono::steady_clock::time_point next_expiry_check_{};  // engine thread only
};

// Loads the model directory and starts an engine on it. Errors are LoadModelDir's (they name the
// file and the key or tensor), so nielsd's main can print them as they are.
common::StatusOr<std::unique_ptr<Engine>> MakeEngine(const std::filesystem::path& model_dir,
                                                     EngineOptions options);

}  // namespace niels::daemon::engine
