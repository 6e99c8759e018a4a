#include "daemon/engine/turn_runner.h"

#include <algorithm>
#include <utility>

namespace niels::daemon::engine {

using common::Status;

Status PrepareCache(EngineState& state, Session& session, Session::Snapshot& snapshot, bool use_kv_cache,
                    int64_t final_length) {
  if (!use_kv_cache) {
    session.StashCache(snapshot);
    return Status::Ok();
  }
  const int64_t tokens = std::min(final_length, state.config().context);
  return state.sessions.Reserve(&session, state.sessions.BytesForTokens(tokens));
}

common::StatusOr<GenerateResult> RunAtomically(EngineState& state, JobContext& job, Session& session,
                                               Session::Snapshot& snapshot, std::span<const int32_t> input,
                                               GenerateOptions options, const EventBuilder& stream_event) {
  options.cancel = job.cancel_flag();
  const int64_t prompt_length = session.length() + static_cast<int64_t>(input.size());
  const int64_t context = state.config().context;
  if (stream_event) {
    const std::vector<int32_t> stop_ids = options.stop_ids;
    const int32_t max_new_tokens = options.max_new_tokens;
    options.on_token = [&, stop_ids, max_new_tokens](const StepEvent& event) {
      const bool last = std::find(stop_ids.begin(), stop_ids.end(), event.id) != stop_ids.end() ||
                        event.index + 1 >= max_new_tokens || prompt_length + event.index + 1 >= context;
      job.SendEvent(stream_event(event, last));
    };
  }
  GenerateResult result;
  state.sessions.SetBusy(&session);  // other jobs may run between steps: keep this cache
  struct Unbusy {
    SessionStore& store;
    ~Unbusy() { store.SetBusy(nullptr); }
  } unbusy{state.sessions};
  try {
    GenerationTask task(state.language_model(), session.sequence(), std::move(options));
    task.Start(input);
    while (!task.done()) {
      if (state.serve_between_steps) state.serve_between_steps(session.id());
      task.Step();
    }
    result = task.TakeResult();
  } catch (...) {
    session.Restore(std::move(snapshot));
    throw;
  }
  if (result.stop_reason == StopReason::kCancelled || job.cancelled()) {
    session.Restore(std::move(snapshot));
    return Status::Cancelled("the request was cancelled; the session is as it was before it");
  }
  state.tokens_generated_total += result.new_tokens.size();
  state.tokens_prefilled_total += static_cast<uint64_t>(result.prefilled_tokens);
  state.sessions.Trim(&session);
  return result;
}

}  // namespace niels::daemon::engine
