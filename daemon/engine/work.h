#pragma once
// Work: one request as the engine's scheduler sees it -- who sent it, which session it names, its
// cancel flag and what to run -- with no wire types in it. daemon/handlers builds one per request
// from the method table (docs/ARCHITECTURE.md, "Engine: scheduling and batching").
//
// A Work is either quick (answered at once, between iterations, never waiting for a generation) or
// generating (it starts a Turn that the scheduler runs over many iterations; the Turn then owns the
// Work). Every Work is answered exactly once: by `quick` itself, by the Turn's on_commit callback,
// or through `fail`.
//
// Threading: built on any thread and handed to Engine::Submit; every callback runs on the engine
// thread, except `fail` for a refusal by Submit itself (on the submitting thread).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/owner.h"
#include "common/status.h"

namespace niels::daemon::engine {

struct EngineState;
struct TurnStart;
using TurnResult = common::StatusOr<TurnStart>;

struct Work {
  common::OwnerId owner = 0;  // the sender, a uid or an API-key principal (the session owner check uses it)
  // The session the request names ("" for none). Requests naming a session run in submission order
  // with every other request on that session (a turn is atomic).
  std::string session_id;
  // Set by Cancel or a disconnect (and by a consumer that refuses a stream event); never null.
  std::shared_ptr<std::atomic<bool>> cancel;
  // Set by a Cancel with keep_output: a turn stops at its next decode step and commits what it
  // generated (GenerateOptions::stop). Null: never.
  std::shared_ptr<std::atomic<bool>> stop;
  // Exactly one of `quick` and `start` is set.
  // Quick: runs between iterations; returns OK after it answered the request, or a non-OK status
  // without answering (the engine then calls `fail` with it).
  std::function<common::Status(EngineState& state, const Work& work)> quick;
  // Generating: validates, prepares the session and returns the Turn to run, or wait_for_memory
  // (the session unchanged; the engine retries later), or an error (the engine calls `fail`).
  std::function<TurnResult(EngineState& state, const Work& work)> start;
  // Answers the request with an error: refused by Submit, cancelled before it ran, failed, or a
  // turn that was cancelled or failed (its session restored).
  std::function<void(const common::Status& status)> fail;
  // The request's size on the wire (bytes): what starting it may cost the engine thread (texts to
  // encode, ids to decode); the scheduler bounds the bytes it starts per iteration (engine.h).
  uint64_t request_bytes = 0;

  // Set by the engine: when Submit took the work, and how long it then waited for the engine
  // thread to start it (milliseconds; set before quick or start runs).
  std::chrono::steady_clock::time_point enqueued;
  double queue_ms = 0;
};

}  // namespace niels::daemon::engine
