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

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include "common/log.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/turn.h"
#include "daemon/model/threading.h"

namespace niels::daemon::engine {

using common::Status;

namespace {

using Clock = std::chrono::steady_clock;

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

// An admitted Turn with the work it answers (the Turn's callbacks belong to the work: both live
// and die together).
struct RunningTurn {
  QueuedWork queued;
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

void Engine::Submit(Work work) {
  Status refused;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      refused = Status::Unavailable("the engine is shutting down");
    } else if (!work.quick == !work.start || work.cancel == nullptr) {
      refused = Status::InvalidArgument("the engine got a request with nothing (or two things) to run");
    } else if (queue_.size() + waiting_count_ >= options_.max_queue) {
      refused = Status::ResourceExhausted(
          fmt::format("the engine queue is full ({} requests); try again later", options_.max_queue));
    } else if (QueuedFor(work.uid) >= options_.max_queued_per_uid) {
      refused = Status::ResourceExhausted(fmt::format(
          "uid {} already has {} requests queued, the limit per user (--max-queued-per-uid); wait "
          "for some to finish",
          work.uid, options_.max_queued_per_uid));
    } else {
      queue_.push_back(QueuedWork{std::move(work), Clock::now()});
    }
  }
  if (!refused.ok()) {
    if (work.fail) work.fail(refused);
    return;
  }
  wake_.notify_one();
}

void Engine::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (QueuedWork& queued : queue_) queued.work.cancel->store(true);
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
      for (QueuedWork& queued : queue_) {
        if (stopping_) queued.work.cancel->store(true);  // everything ends CANCELLED
        held_cancels_.insert(queued.work.cancel);
        ++waiting_per_uid_[queued.work.uid];
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
  state_->sessions_expired_total += expired;
  if (expired > 0) {
    common::LogInfo("deleted {} session(s) idle for more than {:.1f} s (--idle-session-timeout)", expired,
                    std::chrono::duration<double>(options_.idle_session_timeout).count());
  }
}

void Engine::AnswerCancelledWaiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->work.cancel->load()) {
      ++state_->requests_total;
      FinishWithError(it->work, CancelledStatus());
      auto next = std::next(it);
      Unwait(it);
      it = next;
    } else {
      ++it;
    }
  }
}

void Engine::ServeWaiting() {
  // Which waiting work may start now: per-session order means work waits while its session has a
  // running turn or earlier-submitted waiting work (earlier in waiting_, which is in submission
  // order).
  std::set<std::string> named;
  for (const auto& running : running_) named.insert(running->turn->session().id());
  struct Candidate {
    std::list<QueuedWork>::iterator it;
    bool blocked;
  };
  std::map<uint32_t, std::vector<Candidate>> by_uid;
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    const std::string& session = it->work.session_id;
    const bool blocked = !session.empty() && !named.insert(session).second;
    by_uid[it->work.uid].push_back({it, blocked});
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
      if (candidate.it->work.quick) {
        QueuedWork queued = std::move(*candidate.it);
        Unwait(candidate.it);
        ExecuteQuick(queued);
        continue;
      }
      // Work that must keep waiting also holds back later work on its session (marked blocked
      // above, being later in submission order).
      if (TryAdmit(*candidate.it)) {
        Unwait(candidate.it);
        last_admitted_uid_ = uid;
      }
    }
  }
}

void Engine::Unwait(std::list<QueuedWork>::iterator it) {
  {
    std::lock_guard lock(mutex_);
    const uint32_t uid = it->work.uid;
    if (--waiting_per_uid_[uid] == 0) waiting_per_uid_.erase(uid);
    --waiting_count_;
  }
  waiting_.erase(it);
}

size_t Engine::QueuedFor(uint32_t uid) const {
  size_t queued = 0;
  for (const QueuedWork& item : queue_) queued += item.work.uid == uid ? 1 : 0;
  auto it = waiting_per_uid_.find(uid);
  return queued + (it == waiting_per_uid_.end() ? 0 : it->second);
}

namespace {

// Work's info for its callbacks.
WorkInfo InfoOf(const QueuedWork& queued) {
  return WorkInfo{queued.work.uid,
                  std::chrono::duration<double, std::milli>(Clock::now() - queued.enqueued).count(),
                  queued.work.cancel.get()};
}

// Runs `call`; an exception becomes INTERNAL naming where it came from.
template <typename Call>
Status Catching(Call&& call) {
  try {
    return call();
  } catch (const c10::Error& error) {
    return Status::Internal(fmt::format("model error: {}", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    return Status::Internal(fmt::format("engine error: {}", error.what()));
  }
}

}  // namespace

void Engine::ExecuteQuick(QueuedWork& queued) {
  const Work& work = queued.work;
  ++state_->requests_total;
  const WorkInfo info = InfoOf(queued);
  state_->queued_requests = static_cast<uint32_t>(waiting_.size());  // Stats sees the live figures
  state_->running_sequences = static_cast<uint32_t>(running_.size());
  // Released first: once answered, a Cancel naming this request finds nothing in flight.
  Release(work);
  const Status status = Catching([&] { return work.quick(*state_, info); });
  if (!status.ok()) work.fail(status);
}

bool Engine::TryAdmit(QueuedWork& queued) {
  if (running_.size() >= options_.max_batch) return false;
  auto running = std::make_unique<RunningTurn>();
  running->queued = std::move(queued);
  const Work& work = running->queued.work;
  const WorkInfo info = InfoOf(running->queued);
  bool must_wait = false;
  const Status failed = Catching([&]() -> Status {
    // Weights mapped from a file that changed under us would give wrong results (or SIGBUS).
    if (state_->model->weights_file) {
      const Status unchanged = state_->model->weights_file->CheckUnchanged();
      if (!unchanged.ok()) {
        common::LogError("{}", unchanged.message());
        return unchanged;
      }
    }
    TurnResult started = work.start(*state_, info);
    if (!started.ok()) return started.status();
    if (started->wait_for_memory) {
      must_wait = true;
      return Status::Ok();
    }
    running->turn = std::move(started->turn);
    try {
      running->turn->Start(options_.prefill_chunk);
    } catch (...) {
      running->turn->Abort();
      throw;
    }
    return Status::Ok();
  });
  if (must_wait) {
    queued = std::move(running->queued);  // back to the waiting list, unchanged
    return false;
  }
  ++state_->requests_total;
  if (!failed.ok()) {
    running->turn.reset();
    FinishWithError(work, failed);
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
    FinishWithError(running->queued.work, why[k]);
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
      const Work& work = running.queued.work;
      Release(work);
      const Status committed = Catching([&] { return running.turn->Complete(); });
      running.turn.reset();  // the session is free for the next request
      if (!committed.ok()) work.fail(committed);
    }
    it = running_.erase(it);
  }
  if (next_prefill_ >= running_.size()) next_prefill_ = 0;
  if (next_uncached_ >= running_.size()) next_uncached_ = 0;
}

void Engine::Release(const Work& work) {
  std::lock_guard lock(mutex_);
  held_cancels_.erase(work.cancel);
}

void Engine::FinishWithError(const Work& work, const Status& status) {
  Release(work);
  work.fail(status);
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
