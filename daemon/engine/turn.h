#pragma once
// Turn: one atomic generation on a session -- a chat turn or a raw Generate -- as the scheduler runs
// it (docs/ARCHITECTURE.md, "Engine: scheduling and batching"). StartChatTurn (chat_turn.h) and
// StartGenerateTurn (generate_turn.h) build one after their checks and history changes (snapshot
// taken, cache prepared with PrepareCache); the engine then drives it one piece per iteration:
// prefill chunks, batched decode steps (through task()), or uncached steps; and finally calls
// Complete(), which commits (counters, the session's own commit step, KV trim) and reports the
// outcome through on_commit, or restores the session snapshot on cancel or failure.
//
// Threading and ownership: engine thread only. The Turn refers to the session (kept alive: a turn's
// session is busy, and requests that would delete it wait behind the turn). Once admitted, the
// Turn owns the Work it answers (Adopt), so the two live and die together.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/generator.h"
#include "daemon/engine/work.h"
#include "daemon/sessions/session.h"

namespace niels::daemon::engine {

// What a committed turn reports.
struct TurnOutcome {
  const GenerateResult& generation;  // the new ids, why generation stopped, the counters
  const sessions::Session& session;  // already holding the turn's tokens
  int32_t truncated_turns = 0;       // chat: oldest turns dropped to fit the context
  double queue_ms = 0;               // from Submit to the start
};

// How a turn talks to whoever started it (daemon/handlers). Both run on the engine thread.
struct TurnCallbacks {
  // Every sampled id, as soon as it is sampled; StepEvent::last marks the last one the turn can
  // produce. May be empty. To stop the turn (a consumer that went away) set the request's cancel
  // flag: the turn ends within one iteration and is restored.
  std::function<void(const StepEvent& event)> on_token;
  // The turn committed (the session holds its tokens): answer the request.
  std::function<void(const TurnOutcome& outcome)> on_commit;
};

// Gets the session's cache ready for a request that may grow the history to `final_length` tokens,
// and marks the session busy. Cached path: asks for that much KV memory (KvBudget::Admit):
// RESOURCE_EXHAUSTED when it alone exceeds the budget; *must_wait set (nothing changed) when running
// turns hold the memory it needs; then reads a spilled cache back (KvSpiller). Uncached path: moves
// the cache into `snapshot` (the request drops it; Restore brings it back).
common::Status PrepareCache(EngineState& state, sessions::Session& session, sessions::Session::Snapshot& snapshot,
                            bool use_kv_cache, int64_t final_length, bool* must_wait);

class Turn {
 public:
  // The session's own commit step (e.g. a chat turn records its span); runs before on_commit.
  using SessionCommit = std::function<void(sessions::Session& session, const GenerateResult& result)>;

  // For `work` (its cancel flag and queue time; the engine hands the Work itself over with Adopt
  // once the turn is admitted). options.cancel is set to the request's flag and options.on_token to
  // callbacks.on_token. The session must already be prepared (PrepareCache) and `snapshot` taken
  // before any change.
  Turn(EngineState& state, const Work& work, sessions::Session& session, sessions::Session::Snapshot snapshot,
       std::vector<int32_t> input, GenerateOptions options, TurnCallbacks callbacks,
       SessionCommit commit = {}, int32_t truncated_turns = 0);
  ~Turn();  // releases the session's busy mark

  // Takes over the Work this turn answers (the engine, at admission).
  void Adopt(Work work) { work_ = std::move(work); }
  Work& work() { return work_; }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

  // Appends the input; prefill_chunk > 0 leaves the cached prefill and every uncached forward to
  // prefill chunks (GenerationTask::Start), 0 runs the cached prefill or the first uncached forward
  // here. Throws like GenerationTask::Start.
  void Start(int64_t prefill_chunk);
  GenerationTask& task() { return *task_; }
  bool done() const { return task_->done(); }
  bool prefilling() const { return task_->prefilling(); }
  bool cached() const { return task_->use_kv_cache(); }
  const sessions::Session& session() const { return session_; }

  // Commits and calls on_commit (OK), or restores the session when the turn was cancelled
  // (CANCELLED) or its generation failed (kFailed: the generation's error, e.g. a constraint's
  // matcher limit). REQUIRES: done(). Call once.
  common::Status Complete();
  // Restores the session after a failure (an exception from a step); call instead of Complete().
  void Abort();
  // Complete() or Abort() ran.
  bool finished() const { return finished_; }
  // For a turn that fills a session created for it (CreateSession's system prompt): unless the turn
  // commits, the session is deleted when the turn is destroyed (its creator never learns its id).
  void DeleteSessionUnlessCommitted() { delete_unless_committed_ = true; }

 private:
  EngineState& state_;
  const std::atomic<bool>* cancel_;  // the request's flag (the Work keeps it alive)
  std::shared_ptr<std::atomic<bool>> stop_;  // the request's stop flag (null: none)
  double queue_ms_;
  Work work_;
  sessions::Session& session_;
  sessions::Session::Snapshot snapshot_;
  std::vector<int32_t> input_;
  TurnCallbacks callbacks_;
  SessionCommit commit_;
  int32_t truncated_turns_;
  std::unique_ptr<GenerationTask> task_;
  bool finished_ = false;  // Complete() or Abort() ran
  bool committed_ = false;
  bool delete_unless_committed_ = false;
};

// What a generating request's start returns when the request is valid: the Turn to start, or
// wait_for_memory when running turns hold the KV memory it needs (the session is unchanged and the
// engine retries when a turn ends), or neither when the start answered the request itself and
// there is nothing to run.
struct TurnStart {
  std::unique_ptr<Turn> turn;
  bool wait_for_memory = false;
};

}  // namespace niels::daemon::engine
