#include "daemon/engine/engine.h"

#include <algorithm>
#include <exception>
#include <iterator>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <utility>

#include <fmt/format.h>

#include "common/log.h"
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

// How often idle sessions are looked for: every second, or more often for short timeouts.
Clock::duration ExpiryCheckPeriod(std::chrono::milliseconds timeout) {
  if (timeout <= Clock::duration::zero()) return std::chrono::seconds(1);
  return std::min<Clock::duration>(std::chrono::seconds(1), timeout / 4);
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
    } else if (queue_.size() + waiting_count_ >= options_.max_queue) {
      refused = Status::ResourceExhausted(
          fmt::format("the engine queue is full ({} requests); try again later", options_.max_queue));
    } else if (QueuedFor(job.caller.uid) >= options_.max_queued_per_uid) {
      refused = Status::ResourceExhausted(fmt::format(
          "uid {} already has {} requests queued, the limit per user (--max-queued-per-uid); wait "
          "for some to finish",
          job.caller.uid, options_.max_queued_per_uid));
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
  if (options_.threads > 0) model::ConfigureThreads();
  const Clock::duration expiry_period = ExpiryCheckPeriod(options_.idle_session_timeout);
  while (true) {
    {
      std::unique_lock lock(mutex_);
      while (running_.empty() && waiting_.empty() && !stopping_ && queue_.empty()) {
        wake_.wait_for(lock, expiry_period);
        if (queue_.empty() && !stopping_) {
          lock.unlock();
          ExpireIdleSessions();
          lock.lock();
        }
      }
      for (QueuedJob& queued : queue_) {
        if (stopping_) queued.job.cancel->store(true);  // every job ends CANCELLED
        held_cancels_.insert(queued.job.cancel);
        ++waiting_per_uid_[queued.job.caller.uid];
        waiting_.push_back(std::move(queued));
      }
      queue_.clear();
      waiting_count_ = waiting_.size();
      if (stopping_ && running_.empty() && waiting_.empty()) return;
    }
    ExpireIdleSessions();
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

void Engine::AnswerCancelledWaiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->job.cancel->load()) {
      ++state_->requests_total;
      FinishWithError(it->job, CancelledStatus());
      auto next = std::next(it);
      Unwait(it);
      it = next;
    } else {
      ++it;
    }
  }
}

void Engine::ServeWaiting() {
  // Which waiting jobs may start now: per-session order means a job waits while its session has a
  // running turn or an earlier-submitted waiting job (earlier in waiting_, which is in submission
  // order).
  std::set<std::string> named;
  for (const auto& running : running_) named.insert(running->turn->session().id());
  struct Candidate {
    std::list<QueuedJob>::iterator it;
    const Method* method;
    std::string session;
    bool blocked;
  };
  std::map<uint32_t, std::vector<Candidate>> by_uid;
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    const Method* method = FindMethod(it->job.request);
    std::string session = method != nullptr ? method->session(it->job.request) : std::string();
    const bool blocked = !session.empty() && !named.insert(session).second;
    by_uid[it->job.caller.uid].push_back({it, method, std::move(session), blocked});
  }
  // Fairness between users: round robin over the uids, starting after the uid admitted last.
  std::vector<uint32_t> uids;
  auto start = last_admitted_uid_ ? by_uid.upper_bound(*last_admitted_uid_) : by_uid.begin();
  for (auto it = start; it != by_uid.end(); ++it) uids.push_back(it->first);
  for (auto it = by_uid.begin(); it != start; ++it) uids.push_back(it->first);
  size_t most = 0;
  for (const auto& [uid, jobs] : by_uid) most = std::max(most, jobs.size());
  for (size_t round = 0; round < most; ++round) {
    for (uint32_t uid : uids) {
      std::vector<Candidate>& jobs = by_uid[uid];
      if (round >= jobs.size() || jobs[round].blocked) continue;
      Candidate& candidate = jobs[round];
      if (candidate.method == nullptr || candidate.method->quick != nullptr) {
        QueuedJob queued = std::move(*candidate.it);
        Unwait(candidate.it);
        ExecuteQuick(queued);
        continue;
      }
      if (TryAdmit(*candidate.it)) {
        Unwait(candidate.it);
        last_admitted_uid_ = uid;
      } else if (!candidate.session.empty()) {
        // Still waiting: later jobs on its session keep waiting behind it (they are marked
        // blocked already, being later in submission order).
      }
    }
  }
}

void Engine::Unwait(std::list<QueuedJob>::iterator it) {
  {
    std::lock_guard lock(mutex_);
    const uint32_t uid = it->job.caller.uid;
    if (--waiting_per_uid_[uid] == 0) waiting_per_uid_.erase(uid);
    --waiting_count_;
  }
  waiting_.erase(it);
}

size_t Engine::QueuedFor(uint32_t uid) const {
  size_t queued = 0;
  for (const QueuedJob& job : queue_) queued += job.job.caller.uid == uid ? 1 : 0;
  auto it = waiting_per_uid_.find(uid);
  return queued + (it == waiting_per_uid_.end() ? 0 : it->second);
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
    // Weights mapped from a file that changed under us would give wrong results (or SIGBUS).
    if (state_->model->weights_file) failed = state_->model->weights_file->CheckUnchanged();
    if (!failed.ok()) {
      common::LogError("{}", failed.message());
      ++state_->requests_total;
      FinishWithError(job, failed);
      return true;
    }
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
    std::vector<float> logits;  // [B, V]
    try {
      logits = state_->language_model().Decode(tokens, caches, layer >= 0 ? &trace : nullptr);
    } catch (const std::exception& error) {
      for (RunningTurn* running : members) {
        failed.push_back(running);
        why.push_back(Status::Internal(fmt::format("model error: {}", error.what())));
      }
      continue;
    }
    const size_t vocab = logits.size() / members.size();
    ++state_->decode_steps;
    state_->decode_rows += members.size();
    for (size_t b = 0; b < members.size(); ++b) {
      std::vector<float> row;
      if (layer >= 0 && b < trace.rows.size()) row = std::move(trace.rows[b]);
      RunningTurn& running = *members[b];
      const std::span<const float> row_logits(logits.data() + b * vocab, vocab);
      Guarded(running, [&] { running.turn->task().AcceptDecodeLogits(row_logits, std::move(row)); }, failed, why);
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
  // The model kernels' threads (prefill, decode, the uncached forward).
  auto pool = std::make_shared<kernels::WorkerPool>(std::max(options.threads, 1));
  common::StatusOr<std::unique_ptr<model::Model>> model =
      model::LoadModelDir(model_dir, std::move(pool), options.model_options);
  if (!model.ok()) return model.status();
  return std::make_unique<Engine>(std::move(model).value(), std::move(options));
}

}  // namespace niels::daemon::engine
