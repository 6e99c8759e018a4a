#pragma once
// Running one atomic generation request (Chat turn or raw Generate) on a session: cache preparation
// against the KV budget, the generation call with streaming, and restoring the session snapshot on
// cancel or failure. Shared by chat_turn.cc and raw_generate.cc; engine thread only.

#include <cstdint>
#include <functional>
#include <span>

#include "common/status.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/generator.h"
#include "daemon/engine/session.h"

namespace niels::daemon::engine {

// Gets the session's cache ready for a request that may grow the history to `final_length` tokens.
// Cached path: reserves KV budget for it (RESOURCE_EXHAUSTED when it alone exceeds the budget).
// Uncached path: moves the cache into `snapshot` (the request drops it; Restore brings it back).
common::Status PrepareCache(EngineState& state, Session& session, Session::Snapshot& snapshot,
                            bool use_kv_cache, int64_t final_length);

// Builds the TokenEvent for one sampled id (text, extras); `last` tells whether no id can follow.
using EventBuilder = std::function<niels::v1::TokenEvent(const StepEvent& event, bool last)>;

// Generates on the session with options.cancel = the job's flag. Between decode steps it lets the
// engine serve quick jobs on other sessions (EngineState::serve_between_steps). When `stream_event` is set, each
// sampled id goes out as the TokenEvent it builds (a refused event cancels the job). On cancel
// (result kCancelled, or the job's flag set by the end) the session is restored from `snapshot` and
// CANCELLED returned; on an exception it is restored and the exception rethrown. On success the
// engine's counters are updated and the KV budget trimmed.
// `stop_ids` and options.max_new_tokens decide which event is the last one (for text flushing).
common::StatusOr<GenerateResult> RunAtomically(EngineState& state, JobContext& job, Session& session,
                                               Session::Snapshot& snapshot, std::span<const int32_t> input,
                                               GenerateOptions options, const EventBuilder& stream_event);

}  // namespace niels::daemon::engine
