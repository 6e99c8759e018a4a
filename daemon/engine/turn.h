#pragma once
// Turn: one atomic generation on a session -- a Chat turn or a raw Generate -- as the scheduler runs
// it (docs/ARCHITECTURE.md, "Engine: scheduling and batching"). Chat and Generate build one after
// their own validation and history changes (snapshot taken, cache prepared with PrepareCache);
// the engine then drives it one piece per iteration: prefill chunks, batched decode steps (through
// task()), or uncached steps; and finally calls Complete(), which commits (counters, KV trim) and
// builds the final response, or restores the session snapshot on cancel or failure.
//
// Streaming: each sampled id goes out as the TokenEvent the EventBuilder makes; the builder is told
// whether the event is the last one the turn can produce (for text flushing). A refused event
// cancels the job (JobContext::SendEvent).
//
// Threading and ownership: engine thread only. The Turn refers to the session (kept alive: a turn's
// session is busy in the SessionStore, and requests that would delete it wait behind the turn) and
// to the JobContext (owned by the engine next to the Turn).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/generator.h"
#include "daemon/engine/session.h"

namespace niels::daemon::engine {

// Gets the session's cache ready for a request that may grow the history to `final_length` tokens.
// Cached path: asks the store for that much KV memory (SessionStore::Admit): RESOURCE_EXHAUSTED
// when it alone exceeds the budget; *must_wait set (nothing changed) when running turns hold the
// memory it needs. Uncached path: moves the cache into `snapshot` (the request drops it; Restore
// brings it back).
common::Status PrepareCache(EngineState& state, Session& session, Session::Snapshot& snapshot,
                            bool use_kv_cache, int64_t final_length, bool* must_wait);

// Builds the TokenEvent for one sampled id (text, extras); `last` tells whether no id can follow.
using EventBuilder = std::function<niels::v1::TokenEvent(const StepEvent& event, bool last)>;
// Builds the final response of a committed turn (the session already holds the generated tokens).
using TurnFinisher = std::function<HandlerResult(const GenerateResult& result)>;

class Turn {
 public:
  // options.cancel is set to the job's flag. `stream_event` may be empty (nothing streamed). The
  // session must already be prepared (PrepareCache) and `snapshot` taken before any change.
  Turn(EngineState& state, JobContext& job, Session& session, Session::Snapshot snapshot,
       std::vector<int32_t> input, GenerateOptions options, EventBuilder stream_event, TurnFinisher finish);
  ~Turn();  // releases the session's busy mark
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

  // Appends the input; prefill_chunk > 0 leaves the cached prefill to PrefillChunk calls. The
  // uncached path runs its first forward here. Throws like GenerationTask::Start.
  void Start(int64_t prefill_chunk);
  GenerationTask& task() { return *task_; }
  bool done() const { return task_->done(); }
  bool prefilling() const { return task_->prefilling(); }
  bool cached() const { return task_->use_kv_cache(); }
  const Session& session() const { return session_; }
  JobContext& job() { return job_; }

  // Commits or restores (see the file comment) and returns the final response or error.
  // REQUIRES: done(). Call once.
  HandlerResult Complete();
  // Restores the session after a failure (an exception from a step); call instead of Complete().
  void Abort();

 private:
  EngineState& state_;
  JobContext& job_;
  Session& session_;
  Session::Snapshot snapshot_;
  std::vector<int32_t> input_;
  EventBuilder stream_event_;
  TurnFinisher finish_;
  std::unique_ptr<GenerationTask> task_;
  bool finished_ = false;  // Complete() or Abort() ran
};

// What a generating handler returns when the request is valid: the Turn to start, or
// wait_for_memory when running turns hold the KV memory it needs (the session is unchanged and the
// engine retries when a turn ends).
struct TurnStart {
  std::unique_ptr<Turn> turn;
  bool wait_for_memory = false;
};
using TurnResult = common::StatusOr<TurnStart>;

// chat_turn.cc
TurnResult StartChat(EngineState& state, JobContext& job, const niels::v1::ChatRequest& request);
// raw_generate.cc
TurnResult StartGenerate(EngineState& state, JobContext& job, const niels::v1::GenerateRequest& request);

}  // namespace niels::daemon::engine
