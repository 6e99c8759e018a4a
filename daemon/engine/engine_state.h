#pragma once
// EngineState and JobContext: what the per-RPC handlers of the engine work on, and the quick
// handlers themselves (one file per RPC group: session_ops.cc, token_ops.cc, info_stats.cc; the
// generating ones, chat_turn.cc and raw_generate.cc, are declared in turn.h). Internal to
// daemon/engine; everything here runs on the engine thread.
//
// A handler returns the final Response with its result set (request_id is set by the caller), or a
// non-OK Status that the engine sends as Error. Stream events go out through JobContext::SendEvent.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/inference_engine.h"
#include "daemon/engine/session_store.h"
#include "daemon/model/model_dir.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::engine {

struct EngineState {
  EngineState(std::unique_ptr<model::Model> model, const EngineOptions& options);

  const model::LanguageModel& language_model() const { return *model->transformer; }
  const model::Tokenizer& tokenizer() const { return *model->tokenizer; }
  const model::ModelConfig& config() const { return model->config; }

  std::unique_ptr<model::Model> model;
  EngineOptions options;
  SessionStore sessions;
  std::chrono::steady_clock::time_point started;
  uint64_t requests_total = 0;
  uint64_t tokens_generated_total = 0;
  uint64_t tokens_prefilled_total = 0;
  // Scheduler figures for Stats (updated by the engine every iteration).
  uint32_t queued_requests = 0;    // requests waiting (not yet running)
  uint32_t running_sequences = 0;  // turns admitted and not finished
  uint64_t iterations = 0;         // scheduler iterations that ran model work
  double busy_s = 0;               // seconds spent in those iterations
  uint64_t decode_steps = 0;       // batched decode steps
  uint64_t decode_rows = 0;        // sequences summed over those steps (mean batch = rows / steps)
};

// The running job as a handler sees it.
class JobContext {
 public:
  JobContext(const Job& job, double queue_ms) : job_(job), queue_ms_(queue_ms) {}

  uint32_t uid() const { return job_.caller.uid; }
  uint64_t request_id() const { return job_.request.request_id(); }
  double queue_ms() const { return queue_ms_; }
  // The flag Generate reads; set by the server (Cancel, disconnect) or by a refused SendEvent.
  const std::atomic<bool>* cancel_flag() const { return job_.cancel.get(); }
  bool cancelled() const { return job_.cancel->load(); }

  // Sends a non-final TokenEvent. Returns false, sends nothing and cancels the job when the sink
  // refuses it (or refused an earlier one).
  bool SendEvent(niels::v1::TokenEvent event);

 private:
  const Job& job_;
  double queue_ms_;
  bool sink_gone_ = false;
};

using HandlerResult = common::StatusOr<niels::v1::Response>;

// info_stats.cc
HandlerResult HandleInfo(EngineState& state, JobContext& job, const niels::v1::InfoRequest& request);
HandlerResult HandleStats(EngineState& state, JobContext& job, const niels::v1::StatsRequest& request);
// token_ops.cc
HandlerResult HandleTokenize(EngineState& state, JobContext& job, const niels::v1::TokenizeRequest& request);
HandlerResult HandleDetokenize(EngineState& state, JobContext& job,
                               const niels::v1::DetokenizeRequest& request);
// session_ops.cc
HandlerResult HandleCreateSession(EngineState& state, JobContext& job,
                                  const niels::v1::CreateSessionRequest& request);
HandlerResult HandleGetSession(EngineState& state, JobContext& job, const niels::v1::GetSessionRequest& request);
HandlerResult HandleListSessions(EngineState& state, JobContext& job,
                                 const niels::v1::ListSessionsRequest& request);
HandlerResult HandleForkSession(EngineState& state, JobContext& job, const niels::v1::ForkSessionRequest& request);
HandlerResult HandleResetSession(EngineState& state, JobContext& job,
                                 const niels::v1::ResetSessionRequest& request);
HandlerResult HandleDeleteSession(EngineState& state, JobContext& job,
                                  const niels::v1::DeleteSessionRequest& request);
// Chat and Generate (chat_turn.cc, raw_generate.cc) return a Turn for the scheduler: see turn.h.

}  // namespace niels::daemon::engine
