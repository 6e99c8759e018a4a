#include "daemon/engine/engine.h"

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <utility>

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include "common/wire_status.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/method_table.h"
#include "daemon/engine/turn.h"
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

}  // namespace

EngineState::EngineState(std::unique_ptr<model::Model> loaded, const EngineOptions& engine_options)
    : model(std::move(loaded)),
      options(engine_options),
      sessions(model->config, SessionStoreOptions{engine_options.max_sessions, engine_options.kv_budget_bytes,
                                                  engine_options.allow_root}),
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

// An admitted Turn with the job it answers (the JobContext refers to `queued.job`, the Turn to the
// JobContext: all three live and die together).
struct RunningTurn {
  QueuedJob queued;
  std::unique_ptr<JobContext> context;
  std::unique_ptr<Turn> turn;
};

Engine::Engine(std::unique_ptr<model::Model> model, EngineOptions options)
    : options_(std::move(options)), state_(std::make_unique<EngineState>(std::move(model), options_)) {
  options_.max_batch = std::max<uint32_t>(options_.max_batch, 1);
  options_.prefill_chunk = std::max<int64_t>(options_.prefill_chunk, 1);
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
    } else if (queue_.size() + waiting_count_.load() >= options_.max_queue) {
      refused = Status::ResourceExhausted(
          fmt::format("the engine queue is full ({} requests); try again later", options_.max_queue));
    } else {
      queue_.push_back(QueuedJob{std::move(job), Clock::now()});
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
      for (QueuedJob& queued : queue_) queued.job.cancel->store(true);
      for (const auto& cancel : held_cancels_) cancel->store(true);
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  });
}

void Engine::Run() {
  // On this thread: OpenMP's thread count is per thread, and every forward runs here.
  if (options_.threads > 0) model::ConfigureThreads(options_.threads);
  c10::InferenceMode inference_mode;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      if (running_.empty() && waiting_.empty()) {
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      }
      for (QueuedJob& queued : queue_) {
        if (stopping_) queued.job.cancel->store(true);  // every job ends CANCELLED
        held_cancels_.insert(queued.job.cancel);
        waiting_.push_back(std::move(queued));
      }
      queue_.clear();
      if (stopping_ && running_.empty() && waiting_.empty()) return;
    }
    AnswerCancelledWaiting();
    ServeWaiting();
    UpdateFigures();
    if (!running_.empty()) {
      const Clock::time_point start = Clock::now();
      RunModelWork();
      RetireFinished();
      ++state_->iterations;
      state_->busy_s += std::chrono::duration<double>(Clock::now() - start).count();
    }
    waiting_count_.store(waiting_.size());
  }
}

void Engine::AnswerCancelledWaiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->job.cancel->load()) {
      ++state_->requests_total;
      FinishWithError(it->job, CancelledStatus());
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::ServeWaiting() {
  // Sessions that later jobs must not overtake: those with a running turn, then those of jobs left
  // waiting in this pass.
  std::set<std::string> blocked;
  for (const auto& running : running_) blocked.insert(running->turn->session().id());
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const Method* method = FindMethod(it->job.request);
    const std::string session = method != nullptr ? method->session(it->job.request) : std::string();
    if (!session.empty() && blocked.count(session) != 0) {
      ++it;
      continue;
    }
    if (method == nullptr || method->quick != nullptr) {
      QueuedJob queued = std::move(*it);
      it = waiting_.erase(it);
      ExecuteQuick(queued);
      continue;
    }
    if (TryAdmit(*it)) {
      it = waiting_.erase(it);
    } else {
      ++it;
    }
    if (!session.empty()) blocked.insert(session);  // admitted (running) or still waiting
  }
}

void Engine::ExecuteQuick(QueuedJob& queued) {
  const Job& job = queued.job;
  ++state_->requests_total;
  const double queue_ms = std::chrono::duration<double, std::milli>(Clock::now() - queued.enqueued).count();
  JobContext context(job, queue_ms);
  state_->queued_requests = static_cast<uint32_t>(waiting_.size());  // Stats sees the live figures
  state_->running_sequences = static_cast<uint32_t>(running_.size());
  const Method* method = FindMethod(job.request);
  HandlerResult result = Status::Unimplemented("unknown or empty request kind");
  try {
    if (method != nullptr) result = method->quick(*state_, context, job.request);
  } catch (const c10::Error& error) {
    result = Status::Internal(fmt::format("model error: {}", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    result = Status::Internal(fmt::format("engine error: {}", error.what()));
  }
  if (!result.ok()) {
    FinishWithError(job, result.status());
    return;
  }
  Release(job);
  v1::Response response = std::move(result).value();
  response.set_request_id(job.request.request_id());
  job.sink->Send(std::move(response), /*final=*/true);
}

bool Engine::TryAdmit(QueuedJob& queued) {
  if (running_.size() >= options_.max_batch) return false;
  auto running = std::make_unique<RunningTurn>();
  running->queued = std::move(queued);
  const Job& job = running->queued.job;
  const double queue_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - running->queued.enqueued).count();
  running->context = std::make_unique<JobContext>(job, queue_ms);
  const Method* method = FindMethod(job.request);
  Status failed;
  try {
    TurnResult started = method->generating(*state_, *running->context, job.request);
    if (!started.ok()) {
      failed = started.status();
    } else if (started->wait_for_memory) {
      queued = std::move(running->queued);  // back to the waiting list, unchanged
      return false;
    } else {
      running->turn = std::move(started->turn);
      try {
        running->turn->Start(options_.prefill_chunk);
      } catch (...) {
        running->turn->Abort();
        throw;
      }
    }
  } catch (const c10::Error& error) {
    failed = Status::Internal(fmt::format("model error: {}", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    failed = Status::Internal(fmt::format("engine error: {}", error.what()));
  }
  ++state_->requests_total;
  if (!failed.ok()) {
    running->turn.reset();
    FinishWithError(job, failed);
    return true;
  }
  running_.push_back(std::move(running));
  return true;
}

namespace {

// Runs `work` for one turn; on an exception the turn is aborted (session restored) and answered.
template <typename Work>
void Guarded(RunningTurn& running, Work&& work, std::vector<RunningTurn*>& failed, std::vector<Status>& why) {
  try {
    work();
  } catch (const c10::Error& error) {
    failed.push_back(&running);
    why.push_back(Status::Internal(fmt::format("model error: {}", error.what_without_backtrace())));
  } catch (const std::exception& error) {
    failed.push_back(&running);
    why.push_back(Status::Internal(fmt::format("engine error: {}", error.what())));
  }
}

// The next index at or after `from` (cyclically) whose turn satisfies `pick`, or -1.
template <typename Pick>
int64_t NextRoundRobin(const std::vector<std::unique_ptr<RunningTurn>>& running, size_t from, Pick&& pick) {
  const size_t n = running.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (from + k) % n;
    if (pick(*running[i]->turn)) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

void Engine::RunModelWork() {
  std::vector<RunningTurn*> failed;
  std::vector<Status> why;
  // Cancel and disconnect: every running turn notices within this iteration.
  for (auto& running : running_) running->turn->task().PollCancel();

  // One prefill chunk, round robin among the prefilling turns.
  const int64_t prefill = NextRoundRobin(running_, next_prefill_, [](Turn& t) { return t.prefilling(); });
  if (prefill >= 0) {
    RunningTurn& running = *running_[prefill];
    Guarded(running, [&] { running.turn->task().PrefillChunk(); }, failed, why);
    next_prefill_ = static_cast<size_t>(prefill) + 1;
  }
  // One uncached step, round robin among the uncached turns.
  const int64_t uncached =
      NextRoundRobin(running_, next_uncached_, [](Turn& t) { return !t.cached() && !t.done(); });
  if (uncached >= 0) {
    RunningTurn& running = *running_[uncached];
    Guarded(running, [&] { running.turn->task().Step(); }, failed, why);
    next_uncached_ = static_cast<size_t>(uncached) + 1;
  }
  // One batched decode step for every decoding cached turn (grouped by trace layer: a step traces
  // one layer; untraced turns share one step). A turn whose prefill ended above (and sampled its
  // first id) joins from the next iteration, so quick requests get in between its first two tokens.
  std::map<int64_t, std::vector<RunningTurn*>> groups;
  const RunningTurn* just_prefilled = prefill >= 0 ? running_[prefill].get() : nullptr;
  for (auto& running : running_) {
    Turn& turn = *running->turn;
    if (running.get() != just_prefilled && turn.cached() && turn.task().PrepareStep()) {
      groups[turn.task().trace_layer()].push_back(running.get());
    }
  }
  for (auto& [layer, members] : groups) {
    if (members.empty()) continue;
    std::vector<int32_t> tokens;
    std::vector<model::KvCache*> caches;
    for (RunningTurn* running : members) {
      tokens.push_back(running->turn->task().decode_token());
      caches.push_back(&running->turn->task().cache());
    }
    model::AttentionTrace trace{layer, {}};
    torch::Tensor logits;
    try {
      logits = state_->language_model().Decode(tokens, caches, layer >= 0 ? &trace : nullptr);
    } catch (const c10::Error& error) {
      for (RunningTurn* running : members) {
        failed.push_back(running);
        why.push_back(Status::Internal(fmt::format("model error: {}", error.what_without_backtrace())));
      }
      continue;
    }
    ++state_->decode_steps;
    state_->decode_rows += members.size();
    for (size_t b = 0; b < members.size(); ++b) {
      std::optional<torch::Tensor> row;
      if (layer >= 0 && b < trace.rows.size() && trace.rows[b].defined()) row = trace.rows[b];
      RunningTurn& running = *members[b];
      Guarded(running, [&] { running.turn->task().AcceptDecodeLogits(logits[static_cast<int64_t>(b)], row); },
              failed, why);
    }
  }
  for (size_t k = 0; k < failed.size(); ++k) {
    RunningTurn* running = failed[k];
    if (running->turn == nullptr) continue;  // already answered (failed twice)
    running->turn->Abort();
    running->turn.reset();
    FinishWithError(running->queued.job, why[k]);
  }
}

void Engine::RetireFinished() {
  for (auto it = running_.begin(); it != running_.end();) {
    RunningTurn& running = **it;
    if (running.turn != nullptr && !running.turn->done()) {
      ++it;
      continue;
    }
    if (running.turn != nullptr) {
      HandlerResult result = Status::Internal("no result");
      try {
        result = running.turn->Complete();
      } catch (const std::exception& error) {
        result = Status::Internal(fmt::format("engine error: {}", error.what()));
      }
      const Job& job = running.queued.job;
      running.turn.reset();  // the session is free for the next job before the answer goes out
      if (!result.ok()) {
        FinishWithError(job, result.status());
      } else {
        Release(job);
        v1::Response response = std::move(result).value();
        response.set_request_id(job.request.request_id());
        job.sink->Send(std::move(response), /*final=*/true);
      }
    }
    it = running_.erase(it);
  }
  if (next_prefill_ >= running_.size()) next_prefill_ = 0;
  if (next_uncached_ >= running_.size()) next_uncached_ = 0;
}

void Engine::Release(const Job& job) {
  std::lock_guard lock(mutex_);
  held_cancels_.erase(job.cancel);
}

void Engine::FinishWithError(const Job& job, const Status& status) {
  Release(job);
  SendFinal(job, status);
}

void Engine::UpdateFigures() {
  state_->queued_requests = static_cast<uint32_t>(waiting_.size());
  state_->running_sequences = static_cast<uint32_t>(running_.size());
}

common::StatusOr<std::unique_ptr<Engine>> MakeEngine(const std::filesystem::path& model_dir,
                                                     EngineOptions options) {
  // The decode kernels' threads; ConfigureThreads (engine thread) sizes OpenBLAS to match.
  auto pool = std::make_shared<kernels::WorkerPool>(std::max(options.threads, 1));
  common::StatusOr<std::unique_ptr<model::Model>> model = model::LoadModelDir(model_dir, std::move(pool));
  if (!model.ok()) return model.status();
  return std::make_unique<Engine>(std::move(model).value(), std::move(options));
}

}  // namespace niels::daemon::engine
