#pragma once
// EngineOptions: the engine's limits and scheduling knobs, each with its default (nielsd's flags;
// README.md lists them).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "daemon/loaders/model_loader.h"
#include "daemon/sessions/session_registry.h"

namespace niels::daemon::state {
class DurableStore;
}  // namespace niels::daemon::state

namespace niels::daemon::engine {

// What one iteration of the engine thread did (EngineOptions::on_iteration): the work the scheduler
// let into it, counted, so that tests and benchmarks can check its bounds without timing anything.
struct IterationWork {
  int64_t quick_answered = 0;      // quick requests answered in the iteration
  int64_t admitted = 0;            // generating requests admitted (or answered at admission)
  uint64_t started_bytes = 0;      // Work::request_bytes of those two summed
  // Positions the model computed while requests were answered or admitted (before the model step;
  // counted from EngineState::tokens_prefilled_total).
  int64_t start_prefill_tokens = 0;
  int64_t prefill_tokens = 0;      // positions of prompts and uncached forwards in the model step
  int64_t decode_rows = 0;         // decode rows of the model step
  std::map<common::OwnerId, int64_t> running_per_uid;  // running turns per uid during the model step
};

struct EngineOptions {
  // Sessions in memory, in all and per uid, and whether root may use everyone's (SessionLimits has
  // the defaults: 1024, 64, no).
  sessions::SessionLimits session_limits;
  // Sessions unused this long leave memory (durable: unloaded, they stay stored; ephemeral:
  // deleted); zero keeps them until deleted or the daemon stops.
  std::chrono::milliseconds idle_session_timeout = std::chrono::hours(24);
  uint64_t kv_budget_bytes = 1ull << 30;  // all sessions' KV caches; LRU idle caches dropped first
  size_t max_queue = 256;                 // queued requests beyond it: RESOURCE_EXHAUSTED
  size_t max_queued_per_uid = 64;         // queued requests of one uid beyond it: RESOURCE_EXHAUSTED
  // The compiled grammars of the tool sets in use (chat_tools.h, ToolGrammarCache), in all and of
  // the sets one uid sent: a request whose tools would pass either is RESOURCE_EXHAUSTED.
  uint64_t tool_grammar_bytes = uint64_t{1} << 30;
  uint64_t tool_grammar_bytes_per_uid = uint64_t{256} << 20;
  int threads = 0;                        // the model kernels' WorkerPool (MakeEngine); > 0 also
                                          // tunes the heap for activations on the engine thread
  // How the model and the KV caches are kept in memory (nielsd --dtype, --kv-dtype; MakeEngine).
  loaders::LoadOptions model_options;
  uint32_t max_batch = 16;                // running turns (rows of a batched decode step) at most
  // Running turns of one uid at most (--max-running-per-uid); 0: max_batch - 1 (at least 1), so
  // that one user never holds every row and another user's request is admitted beside them.
  uint32_t max_running_per_uid = 0;
  int64_t prefill_chunk = 256;            // prompt tokens prefilled per iteration (all turns
                                          // together; 4x for a turn running alone)
  // Context limit (chat_turn.h): a chat turn that does not fit drops the oldest turns until the
  // history plus the turn is at most context_keep x T tokens (the low-water mark). In [0, 1].
  double context_keep = 0.5;
  // Durable sessions (docs/ARCHITECTURE.md, "Durable sessions"): the state directory's store, owned
  // by the caller and outliving the engine; null keeps sessions in memory only (--ephemeral). With
  // it, the session limits count loaded sessions, idle_session_timeout unloads sessions from memory
  // and the store's session TTL deletes them.
  state::DurableStore* durable = nullptr;
  // Called on the engine thread after every iteration that did anything; empty: nothing is called.
  std::function<void(const IterationWork&)> on_iteration;
};

}  // namespace niels::daemon::engine
