#include "daemon/engine/turn.h"

#include <algorithm>
#include <utility>

namespace niels::daemon::engine {

using common::Status;

Status PrepareCache(EngineState& state, Session& session, Session::Snapshot& snapshot, bool use_kv_cache,
                    int64_t final_length, bool* must_wait) {
  *must_wait = false;
  if (!use_kv_cache) {
    session.StashCache(snapshot);
    state.sessions.MarkBusy(&session, 0);
    return Status::Ok();
  }
  const int64_t tokens = std::min(final_length, state.config().context);
  NIELS_RETURN_IF_ERROR(state.sessions.Admit(&session, state.sessions.BytesForTokens(tokens), must_wait));
  if (!*must_wait) state.sessions.RestoreSpilledCache(session);
  return Status::Ok();
}

Turn::Turn(EngineState& state, JobContext& job, Session& session, Session::Snapshot snapshot,
           std::vector<int32_t> input, GenerateOptions options, EventBuilder stream_event, TurnFinisher finish)
    : state_(state),
      job_(job),
      session_(session),
      snapshot_(std::move(snapshot)),
      input_(std::move(input)),
      stream_event_(std::move(stream_event)),
      finish_(std::move(finish)) {
  options.cancel = job_.cancel_flag();
  if (stream_event_) {
    const int64_t prompt_length = session_.length() + static_cast<int64_t>(input_.size());
    const int64_t context = state_.config().context;
    const std::vector<int32_t> stop_ids = options.stop_ids;
    const int32_t max_new_tokens = options.max_new_tokens;
    // Chained after any on_token the caller set (Generate collects its steps there).
    options.on_token = [this, inner = std::move(options.on_token), stop_ids, max_new_tokens, prompt_length,
                        context](const StepEvent& event) {
      if (inner) inner(event);
      const bool last = std::find(stop_ids.begin(), stop_ids.end(), event.id) != stop_ids.end() ||
                        event.index + 1 >= max_new_tokens || prompt_length + event.index + 1 >= context;
      job_.SendEvent(stream_event_(event, last));
    };
  }
  task_ = std::make_unique<GenerationTask>(state_.language_model(), session_.sequence(), std::move(options));
}

Turn::~Turn() { state_.sessions.ClearBusy(&session_); }

void Turn::Start(int64_t prefill_chunk) { task_->Start(input_, prefill_chunk); }

HandlerResult Turn::Complete() {
  finished_ = true;
  GenerateResult result = task_->TakeResult();
  state_.sessions.ClearBusy(&session_);
  if (result.stop_reason == StopReason::kCancelled || job_.cancelled()) {
    session_.Restore(std::move(snapshot_));
    return Status::Cancelled("the request was cancelled; the session is as it was before it");
  }
  state_.tokens_generated_total += result.new_tokens.size();
  state_.tokens_prefilled_total += static_cast<uint64_t>(result.prefilled_tokens);
  if (cached()) state_.sessions.RecordPrefill(result.prefilled_tokens, result.time_to_first_token_s);
  HandlerResult response = finish_(result);
  // Durable sessions: the turn is committed before its final response goes out; a failed write
  // (disk full) fails the turn and leaves the session as it was.
  if (response.ok()) {
    if (Status committed = state_.sessions.Commit(session_); !committed.ok()) {
      session_.Restore(std::move(snapshot_));
      return committed;
    }
  }
  state_.sessions.Trim(&session_);
  return response;
}

void Turn::Abort() {
  if (finished_) return;
  finished_ = true;
  state_.sessions.ClearBusy(&session_);
  session_.Restore(std::move(snapshot_));
}

}  // namespace niels::daemon::engine
