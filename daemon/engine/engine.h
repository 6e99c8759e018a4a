#pragma once
// Engine: owns the loaded model, every session with its KV cache, and ONE engine thread that runs
// the scheduler below (so the model is never used from two threads).
//
// Threading: Submit() and Shutdown() are thread-safe; Submit() only enqueues (under a mutex) and
// never waits for model work. Every callback of a Work runs on the engine thread, except the
// refusals of Submit() itself (work.h).
//
// Scheduling (iteration-level, continuous batching; docs/ARCHITECTURE.md, "Engine: scheduling and
// batching"). Every Chat/Generate is a Turn. The engine thread loops over iterations:
//  1. Submitted work joins the waiting list. Waiting work whose cancel flag is set is answered
//     CANCELLED at once, wherever it is in the list.
//  2. Waiting work is taken in submission order, except that work naming a session waits while
//     that session has a running turn or earlier waiting work (per-session order; a turn is
//     atomic). Quick work (Info, Stats, Tokenize, Detokenize, session operations but a
//     CreateSession with a system prompt, whose prefill is a turn) is answered right there, never
//     waiting for any generation. Generating work is admitted as a running
//     Turn when fewer than max_batch turns run, fewer than max_running_per_uid of them are its
//     uid's, and the KV budget can hold what it may grow to (SessionStore::Admit); otherwise it
//     waits (or fails with RESOURCE_EXHAUSTED when it alone exceeds the budget). A start may also
//     answer the request itself and run nothing (TurnStart without a turn).
//  3. Model work, as the StepPlanner plans it (step_planner.h): ONE batched forward step with the
//     next prefill chunks of the prefilling turns -- prompts, a new session's system prompt, and
//     the forward windows of uncached turns alike -- and a decode row for every decoding turn,
//     each sampled with its own sampler; beside it the turns that trace attention.
//  4. Finished turns (stop rule, cancel, disconnect) are committed or restored and answered.
// A cancelled running turn therefore stops within one iteration. Equal requests started together
// decode in the same steps and finish together; nothing starves (round robin over prefills, every
// decoding turn in every step).
//  2a. Fairness between users: the waiting list is taken round robin over the uids that have
//     waiting requests (each uid's own requests in submission order), starting after the uid
//     served last, so a user with many queued requests delays another user's by at most one
//     request; when rows free up they go to the uids in turn, and no uid holds more than
//     max_running_per_uid rows (default max_batch - 1: one row is always left to the others).
//  2b. Bounded start: step 2 starts requests (answers quick ones, admits generating ones) only
//     while the request bytes started in this iteration (Work::request_bytes) stay within
//     kStartBytesPerIteration, at least one request per iteration; the rest wait for the next
//     iteration, after the model step. With the handlers' per-request limits (a Tokenize text, a
//     system prompt, a Detokenize's ids) one iteration's requests cost the engine thread about one
//     such request before the next decode step.
//
// Limits: at most `max_queue` queued requests in all and `max_queued_per_uid` per uid (RESOURCE_EXHAUSTED
// beyond either); sessions per uid and in all (SessionRegistry); sessions unused for
// `idle_session_timeout` leave memory (checked about once a second and between iterations; a
// session with a running turn never does).
//
// Request semantics (proto/PROTOCOL.md describes them on the wire):
// - Work whose cancel flag is set before it starts is answered CANCELLED without running.
// - Chat and Generate turns are atomic: on cancel or failure the session is restored exactly
//   (tokens, turns, cache length) and the request is answered with CANCELLED (or the failure).
// - The chat context policy is StartChatTurn's (chat_turn.h).
//
// The engine speaks no wire protocol: daemon/handlers turns each request into a Work (work.h) with
// typed arguments and callbacks, and the engine answers through them.

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

#include "common/owner.h"
#include "common/status.h"
#include "daemon/engine/engine_options.h"
#include "daemon/engine/step_planner.h"
#include "daemon/engine/work.h"
#include "daemon/loaders/model_loader.h"

namespace niels::daemon::engine {

// The request bytes (Work::request_bytes) an iteration starts at most before its model step: quick
// requests answered and generating requests admitted, at least one per iteration (engine.h,
// "Scheduling" 2b).
inline constexpr uint64_t kStartBytesPerIteration = uint64_t{128} << 10;

struct EngineState;  // engine_state.h: what the code run for a request works on
class Turn;          // turn.h: an admitted generation, owning its Work

class Engine {
 public:
  // Takes ownership of a loaded model and starts the engine thread. REQUIRES: model is complete.
  Engine(std::unique_ptr<loaders::Model> model, EngineOptions options);
  ~Engine();  // Shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Enqueues `work` (never waits for model work; thread-safe). Every Work is answered exactly once
  // (work.h); a refusal (UNAVAILABLE after Shutdown, RESOURCE_EXHAUSTED when the queue or the
  // sender's share of it is full, INVALID_ARGUMENT for a Work with neither quick nor start) is
  // answered through work.fail on the calling thread.
  void Submit(Work work);
  // Cancels every queued and running request (each answered CANCELLED), stops the engine thread and
  // returns when it has stopped. Idempotent; thread-safe.
  void Shutdown();

  const loaders::Model& model() const;
  const EngineOptions& options() const { return options_; }
  // What the engine thread owns. Read it only on the engine thread (from Work callbacks) or before
  // the first Submit.
  EngineState& state() { return *state_; }

 private:
  void Run();
  // The steps of one iteration (see Scheduling); engine thread only.
  void AnswerCancelledWaiting();
  void ServeWaiting();
  void RunModelWork();
  void RetireFinished();
  // Runs quick work now; it answers itself (or is answered with its error).
  void ExecuteQuick(Work& work);
  // Tries to admit generating work: true when it was answered or admitted (it leaves the waiting
  // list), false when it must wait.
  bool TryAdmit(Work& work);
  // Executes the parts of a plan; a turn whose part throws is added to `failed` with the reason.
  void RunTracedPrefill(Turn& turn, std::vector<std::pair<Turn*, common::Status>>& failed);
  void RunBatchedStep(const StepPlan& plan, std::vector<std::pair<Turn*, common::Status>>& failed);
  void RunTracedDecodes(int64_t layer, const std::vector<Turn*>& group,
                        std::vector<std::pair<Turn*, common::Status>>& failed);
  void UpdateFigures();
  // Answers work the engine thread held with an error / forgets its cancel flag.
  void FinishWithError(const Work& work, const common::Status& status);
  void Release(const Work& work);
  // Deletes idle sessions when a check is due. Engine thread only.
  void ExpireIdleSessions();
  // Removes work from waiting_ (and from the per-uid counts).
  void Unwait(std::list<Work>::iterator it);
  // Work of `uid` submitted and not yet started. REQUIRES: mutex_ held.
  size_t QueuedFor(common::OwnerId uid) const;

  EngineOptions options_;
  std::unique_ptr<EngineState> state_;  // touched only by the engine thread (after construction)

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> queue_;  // guarded by mutex_: submitted, not yet seen by the engine thread
  bool stopping_ = false;        // guarded by mutex_
  // Guarded by mutex_: the cancel flags of the work the engine thread holds (waiting or running),
  // so that Shutdown can flag them even while the engine thread is busy.
  std::set<std::shared_ptr<std::atomic<bool>>> held_cancels_;
  // Engine thread only:
  std::list<Work> waiting_;                     // seen, not yet admitted or answered
  std::vector<std::unique_ptr<Turn>> running_;  // admitted turns, in admission order
  StepPlanner planner_;
  std::optional<common::OwnerId> last_served_uid_;  // where the uid round robin resumes
  // Guarded by mutex_: work in waiting_ (for Submit's queue limits), in all and per uid.
  size_t waiting_count_ = 0;
  std::map<common::OwnerId, size_t> waiting_per_uid_;
  std::once_flag shutdown_once_;
  std::thread thread_;
  std::chrono::steady_clock::time_point next_expiry_check_{};  // engine thread only
  // Model work ran since the heap's free pages were last released (engine thread only): released
  // once the engine has waited a whole idle period (up to a second) with nothing to do.
  bool heap_to_release_ = false;
  IterationWork iteration_;  // what this iteration did so far (engine thread only; on_iteration)
};

// Loads the model directory and starts an engine on it. Errors are LoadModelDir's (they name the
// file and the key or tensor), so nielsd's main can print them as they are.
common::StatusOr<std::unique_ptr<Engine>> MakeEngine(const std::filesystem::path& model_dir,
                                                     EngineOptions options);

}  // namespace niels::daemon::engine
