#include "daemon/engine/turn.h"

#include <algorithm>
#include <string>
#include <utility>

namespace niels::daemon::engine {

using common::Status;

Status PrepareCache(EngineState& state, sessions::Session& session, sessions::Session::Snapshot& snapshot,
                    bool use_kv_cache, int64_t final_length, bool* must_wait) {
  *must_wait = false;
  if (!use_kv_cache) {
    session.StashCache(snapshot);  // its blocks stay held (by the snapshot) until the turn ends
    session.MarkBusy(snapshot.stashed_cache ? snapshot.stashed_cache->blocks() : 0);
    return Status::Ok();
  }
  NIELS_RETURN_IF_ERROR(state.kv.Admit(session, final_length, must_wait));
  if (!*must_wait) state.spiller.RestoreSpilledCache(session);
  return Status::Ok();
}

Turn::Turn(EngineState& state, const Work& work, sessions::Session& session, sessions::Session::Snapshot snapshot,
           std::vector<int32_t> input, GenerateOptions options, TurnCallbacks callbacks, SessionCommit commit,
           int32_t truncated_turns)
    : state_(state),
      cancel_(work.cancel.get()),
      stop_(work.stop),
      queue_ms_(work.queue_ms),
      session_(session),
      snapshot_(std::move(snapshot)),
      input_(std::move(input)),
      callbacks_(std::move(callbacks)),
      commit_(std::move(commit)),
      truncated_turns_(truncated_turns) {
  options.cancel = cancel_;
  options.stop = stop_.get();
  options.on_token = callbacks_.on_token;
  task_ = std::make_unique<GenerationTask>(state_.language_model(), session_.sequence(), std::move(options));
}

Turn::~Turn() {
  session_.ClearBusy();
  if (delete_unless_committed_ && !committed_) {
    const std::string id = session_.id();  // a copy: Delete destroys the session
    (void)state_.sessions.Delete(id, session_.owner());
  }
}

void Turn::Start(int64_t prefill_chunk) { task_->Start(input_, prefill_chunk); }

Status Turn::Complete() {
  finished_ = true;
  GenerateResult result = task_->TakeResult();
  session_.ClearBusy();
  if (result.stop_reason == StopReason::kCancelled || (cancel_ != nullptr && cancel_->load())) {
    session_.Restore(std::move(snapshot_));
    return Status::Cancelled("the request was cancelled; the session is as it was before it");
  }
  if (result.stop_reason == StopReason::kFailed) {
    session_.Restore(std::move(snapshot_));
    return result.error;
  }
  state_.tokens_generated_total += result.new_tokens.size();
  state_.tokens_prefilled_total += static_cast<uint64_t>(result.prefilled_tokens);
  if (cached()) state_.spiller.RecordPrefill(result.prefilled_tokens, result.time_to_first_token_s);
  if (commit_) commit_(session_, result);
  // Durable sessions: the turn is stored before its final response goes out (on_commit sends it);
  // a failed write (disk full) fails the turn and leaves the session as it was.
  if (Status stored = state_.sessions.Commit(session_); !stored.ok()) {
    session_.Restore(std::move(snapshot_));
    return stored;
  }
  committed_ = true;
  if (callbacks_.on_commit) {
    callbacks_.on_commit(TurnOutcome{result, session_, truncated_turns_, queue_ms_});
  }
  return Status::Ok();
}

void Turn::Abort() {
  if (finished_) return;
  finished_ = true;
  session_.ClearBusy();
  session_.Restore(std::move(snapshot_));
}

}  // namespace niels::daemon::engine
