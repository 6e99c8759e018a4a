#include "daemon/engine/turn.h"

#include <algorithm>
#include <utility>

namespace niels::daemon::engine {

using common::Status;

Status PrepareCache(EngineState& state, Session& session, Session::Snapshot& snapshot, bool use_kv_cache,
                    int64_t final_length, bool* must_wait) {
  *must_wait = false;
  if (!use_kv_cache) {
    session.StashCache(snapshot);  // its blocks stay held (by the snapshot) until the turn ends
    state.sessions.MarkBusy(&session, snapshot.stashed_cache ? snapshot.stashed_cache->blocks() : 0);
    return Status::Ok();
  }
  NIELS_RETURN_IF_ERROR(state.sessions.Admit(&session, final_length, must_wait));
  if (!*must_wait) state.sessions.RestoreSpilledCache(session);
  return Status::Ok();
}

Turn::Turn(EngineState& state, const WorkInfo& info, Session& session, Session::Snapshot snapshot,
           std::vector<int32_t> input, GenerateOptions options, TurnCallbacks callbacks, SessionCommit commit,
           int32_t truncated_turns)
    : state_(state),
      info_(info),
      session_(session),
      snapshot_(std::move(snapshot)),
      input_(std::move(input)),
      callbacks_(std::move(callbacks)),
      commit_(std::move(commit)),
      truncated_turns_(truncated_turns) {
  options.cancel = info_.cancel;
  options.on_token = callbacks_.on_token;
  task_ = std::make_unique<GenerationTask>(state_.language_model(), session_.sequence(), std::move(options));
}

Turn::~Turn() { state_.sessions.ClearBusy(&session_); }

void Turn::Start(int64_t prefill_chunk) { task_->Start(input_, prefill_chunk); }

Status Turn::Complete() {
  finished_ = true;
  GenerateResult result = task_->TakeResult();
  state_.sessions.ClearBusy(&session_);
  if (result.stop_reason == StopReason::kCancelled || (info_.cancel != nullptr && info_.cancel->load())) {
    session_.Restore(std::move(snapshot_));
    return Status::Cancelled("the request was cancelled; the session is as it was before it");
  }
  state_.tokens_generated_total += result.new_tokens.size();
  state_.tokens_prefilled_total += static_cast<uint64_t>(result.prefilled_tokens);
  if (cached()) state_.sessions.RecordPrefill(result.prefilled_tokens, result.time_to_first_token_s);
  if (commit_) commit_(session_, result);
  // Durable sessions: the turn is stored before its final response goes out (on_commit sends it);
  // a failed write (disk full) fails the turn and leaves the session as it was.
  if (Status stored = state_.sessions.Commit(session_); !stored.ok()) {
    session_.Restore(std::move(snapshot_));
    return stored;
  }
  if (callbacks_.on_commit) {
    callbacks_.on_commit(TurnOutcome{result, session_, truncated_turns_, info_.queue_ms});
  }
  return Status::Ok();
}

void Turn::Abort() {
  if (finished_) return;
  finished_ = true;
  state_.sessions.ClearBusy(&session_);
  session_.Restore(std::move(snapshot_));
}

}  // namespace niels::daemon::engine
