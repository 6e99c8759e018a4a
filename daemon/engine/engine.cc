#include "daemon/engine/engine.h"

#include <algorithm>
#include <exception>
#include <string>
#include <vector>
#include <utility>

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include "common/log.h"
#include "common/wire_status.h"
#include "daemon/engine/engine_state.h"
#include "daemon/model/threading.h"

namespace niels::daemon::engine {

namespace v1 = niels::v1;
using common::Status;

namespace {

using Clock = std::chrono::steady_clock;

void SendFinal(const Job& job, const Status& status) {
  v1::Response response;
  response.set_request_id(job.request.request_id());
  *response.mutable_error() = common::ToProto(status);
  job.sink->Send(std::move(response), /*final=*/true);
}

Status CancelledStatus() { return Status::Cancelled("the request was cancelled"); }

// How often idle sessions are looked for: every second, or more often for short timeouts.
Clock::duration ExpiryCheckPeriod(std::chrono::milliseconds timeout) {
  if (timeout <= Clock::duration::zero()) return std::chrono::seconds(1);
  return std::min<Clock::duration>(std::chrono::seconds(1), timeout / 4);
}

// Runs the handler for the request's kind.
HandlerResult Dispatch(EngineState& state, JobContext& context, const v1::Request& request) {
  switch (request.kind_case()) {
    case v1::Request::kInfo: return HandleInfo(state, context, request.info());
    case v1::Request::kCreateSession: return HandleCreateSession(state, context, request.create_session());
    case v1::Request::kChat: return HandleChat(state, context, request.chat());
    case v1::Request::kGenerate: return HandleGenerate(state, context, request.generate());
    case v1::Request::kTokenize: return HandleTokenize(state, context, request.tokenize());
    case v1::Request::kDetokenize: return HandleDetokenize(state, context, request.detokenize());
    case v1::Request::kGetSession: return HandleGetSession(state, context, request.get_session());
    case v1::Request::kListSessions: return HandleListSessions(state, context, request.list_sessions());
    case v1::Request::kForkSession: return HandleForkSession(state, context, request.fork_session());
    case v1::Request::kResetSession: return HandleResetSession(state, context, request.reset_session());
    case v1::Request::kDeleteSession: return HandleDeleteSession(state, context, request.delete_session());
    case v1::Request::kStats: return HandleStats(state, context, request.stats());
    case v1::Request::kCancel:
      return Status::InvalidArgument("Cancel is handled by the server, not the engine");
    case v1::Request::KIND_NOT_SET: break;
  }
  return Status::Unimplemented("unknown or empty request kind");
}

}  // namespace

EngineState::EngineState(std::unique_ptr<model::Model> loaded, const EngineOptions& engine_options)
    : model(std::move(loaded)),
      options(engine_options),
      sessions(model->config, SessionStoreOptions{.max_sessions = engine_options.max_sessions,
                                                  .max_sessions_per_uid = engine_options.max_sessions_per_uid,
                                                  .kv_budget_bytes = engine_options.kv_budget_bytes,
                                                  .allow_root = engine_options.allow_root}),
      started(Clock::now()) {}

bool JobContext::SendEvent(v1::TokenEvent event) {
  if (sink_gone_) return false;
  v1::Response response;
  response.set_request_id(request_id());
  *response.mutable_token() = std::move(event);
  if (!job_.sink->Send(std::move(response), /*final=*/false)) {
    sink_gone_ = true;
    job_.cancel->store(true);
  }
  return !sink_gone_;
}

Engine::Engine(std::unique_ptr<model::Model> model, EngineOptions options)
    : options_(std::move(options)), state_(std::make_unique<EngineState>(std::move(model), options_)) {
  state_->serve_between_steps = [this](const std::string& busy_session) { ServeBetweenSteps(busy_session); };
  thread_ = std::thread([this] { Run(); });
}

Engine::~Engine() { Shutdown(); }

const model::Model& Engine::model() const { return *state_->model; }

void Engine::Submit(Job job) {
  Status refused;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      refused = Status::Unavailable("the engine is shutting down");
    } else if (job.request.kind_case() == v1::Request::kCancel) {
      refused = Status::InvalidArgument("Cancel is handled by the server, not the engine");
    } else if (queue_.size() >= options_.max_queue) {
      refused = Status::ResourceExhausted(
          fmt::format("the engine queue is full ({} requests); try again later", options_.max_queue));
    } else if (queue_.queued_for(job.caller.uid) >= options_.max_queued_per_uid) {
      refused = Status::ResourceExhausted(fmt::format(
          "uid {} already has {} requests queued, the limit per user (--max-queued-per-uid); wait "
          "for some to finish",
          job.caller.uid, options_.max_queued_per_uid));
    } else {
      queue_.Push(QueuedJob{std::move(job), Clock::now()});
    }
  }
  if (!refused.ok()) {
    SendFinal(job, refused);
    return;
  }
  wake_.notify_one();
}

void Engine::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      if (running_cancel_) running_cancel_->store(true);
      queue_.CancelAll();
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  });
}

void Engine::Run() {
  // On this thread: OpenMP's thread count is per thread, and every forward runs here.
  if (options_.threads > 0) model::ConfigureThreads(options_.threads);
  c10::InferenceMode inference_mode;
  const Clock::duration expiry_period = ExpiryCheckPeriod(options_.idle_session_timeout);
  while (true) {
    QueuedJob queued;
    {
      std::unique_lock lock(mutex_);
      while (!stopping_ && queue_.empty()) {
        wake_.wait_for(lock, expiry_period);
        if (queue_.empty() && !stopping_) {
          lock.unlock();
          ExpireIdleSessions();
          lock.lock();
        }
      }
      if (queue_.empty()) return;  // stopping and drained
      queued = queue_.PopNext();
      running_cancel_ = queued.job.cancel;
    }
    Execute(queued);
    {
      std::lock_guard lock(mutex_);
      running_cancel_.reset();
    }
    ExpireIdleSessions();
  }
}

void Engine::ExpireIdleSessions() {
  if (options_.idle_session_timeout <= Clock::duration::zero()) return;
  const Clock::time_point now = Clock::now();
  if (now < next_expiry_check_) return;
  next_expiry_check_ = now + ExpiryCheckPeriod(options_.idle_session_timeout);
  const size_t expired = state_->sessions.ExpireIdle(now - options_.idle_session_timeout);
  if (expired > 0) {
    common::LogInfo("deleted {} session(s) idle for more than {:.1f} s (--idle-session-timeout)", expired,
                    std::chrono::duration<double>(options_.idle_session_timeout).count());
  }
}

void Engine::ServeBetweenSteps(const std::string& busy_session) {
  std::vector<QueuedJob> ready;
  {
    std::lock_guard lock(mutex_);
    ready = queue_.PopQuick(busy_session);
  }
  for (QueuedJob& queued : ready) Execute(queued);
}

void Engine::Execute(QueuedJob& queued) {
  const Job& job = queued.job;
  ++state_->requests_total;
  if (job.cancel->load()) {  // cancelled while queued, or shutting down
    SendFinal(job, CancelledStatus());
    return;
  }
  {
    std::lock_guard lock(mutex_);
    state_->queued_requests = static_cast<uint32_t>(queue_.size());
  }
  const double queue_ms = std::chrono::duration<double, std::milli>(Clock::now() - queued.enqueued).count();
  JobContext context(job, queue_ms);
  HandlerResult result = Status::Internal("no result");
  try {
    if (!IsQuick(job.request) && state_->model->weights_file) {
      // Weights mapped from a file that changed under us would give wrong results (or SIGBUS).
      if (Status unchanged = state_->model->weights_file->CheckUnchanged(); !unchanged.ok()) {
        common::LogError("{}", unchanged.message());
        SendFinal(job, unchanged);
        return;
      }
    }
    result = Dispatch(*state_, context, job.request);
  } catch (const c10::Error& error) {
    result = Status::Internal(fmt::format("model error: {}", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    result = Status::Internal(fmt::format("engine error: {}", error.what()));
  }
  if (!result.ok()) {
    SendFinal(job, result.status());
    return;
  }
  v1::Response response = std::move(result).value();
  response.set_request_id(job.request.request_id());
  job.sink->Send(std::move(response), /*final=*/true);
}

common::StatusOr<std::unique_ptr<Engine>> MakeEngine(const std::filesystem::path& model_dir,
                                                     EngineOptions options) {
  common::StatusOr<std::unique_ptr<model::Model>> model = model::LoadModelDir(model_dir);
  if (!model.ok()) return model.status();
  return std::make_unique<Engine>(std::move(model).value(), std::move(options));
}

}  // namespace niels::daemon::engine
