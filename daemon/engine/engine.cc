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
                                                  .kv_dtype = engine_options.model_options.kv_dtype,
                                                  .allow_root = engine_options.allow_root},
               engine_options.durable),
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
  const Clock::time_point now = Clock::now();
  if (now < next_expiry_check_) return;
  next_expiry_check_ = now + ExpiryCheckPeriod(options_.idle_session_timeout);
  if (const state::DurableStore* durable = options_.durable; durable && durable->options().session_ttl_s > 0) {
    const size_t deleted = state_->sessions.ExpireStored(UnixNow() - durable->options().session_ttl_s);
    if (deleted > 0) {
      common::LogInfo("deleted {} session(s) unused for more than {:.0f} s (--session-ttl)", deleted,
                      durable->options().session_ttl_s);
    }
  }
  if (options_.idle_session_timeout <= Clock::duration::zero()) return;
  const size_t expired = state_->sessions.ExpireIdle(now - options_.idle_session_timeout);
  state_->sessions_expired_total += expired;
  if (expired > 0) {
    common::LogInfo("{} {} session(s) idle for more than {:.1f} s (--idle-session-timeout)",
                    options_.durable ? "unloaded (kept on disk)" : "deleted", expired,
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
  } catch (const model::KvExhausted& error) {
    return Status::ResourceExhausted(error.what());
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
  } catch (const model::KvExhausted& error) {
    failed.push_back(&running);
    why.push_back(Status::ResourceExhausted(error.what()));
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

  // A traced prefill (Generate with trace_layer) runs its own chunk, one such turn per iteration:
  // its last position goes through Decode to record the attention row.
  const int64_t traced = NextRoundRobin(running_, next_prefill_, [](Turn& t) {
    return t.prefilling() && !t.task().mixable_prefill();
  });
  const RunningTurn* traced_prefill = traced >= 0 ? running_[traced].get() : nullptr;
  if (traced >= 0) {
    RunningTurn& running = *running_[traced];
    Guarded(running, [&] { running.turn->task().PrefillChunk(); }, failed, why);
  }
  // One uncached step, round robin among the uncached turns.
  const int64_t uncached =
      NextRoundRobin(running_, next_uncached_, [](Turn& t) { return !t.cached() && !t.done(); });
  if (uncached >= 0) {
    RunningTurn& running = *running_[uncached];
    Guarded(running, [&] { running.turn->task().Step(); }, failed, why);
    next_uncached_ = static_cast<size_t>(uncached) + 1;
  }

  // ONE forward step for the rest: the next prefill chunks of the prefilling turns (round robin,
  // up to prefill_chunk tokens in all, so a long prompt does not stall the others) and one row for
  // every decoding turn. The step is row-invariant: nobody's result depends on who else is in it.
  // A turn whose prefill ends in this step samples its first id; it decodes from the next
  // iteration on, so quick requests get in between its first two tokens.
  struct Member {
    RunningTurn* running;
    bool prefill;
    bool wants_logits;
  };
  std::vector<model::SequenceInput> inputs;
  std::vector<Member> members;
  // A turn running alone, with nothing waiting, prefills in pieces four times as large: the pieces
  // only exist so that others get steps in between (a re-prefill after the context limit then
  // costs about what one full forward costs).
  const bool alone = running_.size() == 1 && waiting_.empty();
  int64_t budget = alone ? 4 * options_.prefill_chunk : options_.prefill_chunk;
  size_t last_prefilled = running_.size();
  for (size_t k = 0; k < running_.size() && budget > 0; ++k) {
    const size_t i = (next_prefill_ + k) % running_.size();
    GenerationTask& task = running_[i]->turn->task();
    if (!task.mixable_prefill()) continue;
    const std::span<const int32_t> chunk = task.PendingChunk(budget);
    if (chunk.empty()) continue;
    const bool samples = task.ChunkSamples(static_cast<int64_t>(chunk.size()));
    inputs.push_back({&task.cache(), chunk, samples});
    members.push_back({running_[i].get(), true, samples});
    budget -= static_cast<int64_t>(chunk.size());
    last_prefilled = i;
  }
  if (last_prefilled < running_.size()) next_prefill_ = last_prefilled + 1;
  if (traced >= 0 && last_prefilled == running_.size()) next_prefill_ = static_cast<size_t>(traced) + 1;
  // Decode rows; traced ones grouped by layer into their own steps (a step traces one layer).
  std::map<int64_t, std::vector<RunningTurn*>> traced_groups;
  int64_t decode_rows = 0;
  for (auto& running : running_) {
    Turn& turn = *running->turn;
    if (running.get() == traced_prefill || !turn.cached() || !turn.task().PrepareStep()) continue;
    if (turn.task().trace_layer() >= 0) {
      traced_groups[turn.task().trace_layer()].push_back(running.get());
      continue;
    }
    inputs.push_back({&turn.task().cache(), turn.task().decode_input(), true});
    members.push_back({running.get(), false, true});
    ++decode_rows;
  }
  if (!inputs.empty()) {
    std::vector<float> logits;  // [rows that want logits, V]
    const Status stepped = Catching([&] {
      logits = state_->language_model().Step(inputs);
      return Status::Ok();
    });
    if (!stepped.ok()) {
      for (const Member& member : members) {
        failed.push_back(member.running);
        why.push_back(stepped);
      }
    } else {
      if (decode_rows > 0) {
        ++state_->decode_steps;
        state_->decode_rows += static_cast<uint64_t>(decode_rows);
      }
      const size_t vocab = static_cast<size_t>(state_->language_model().config().vocab_size);
      size_t row = 0;
      for (const Member& member : members) {
        GenerationTask& task = member.running->turn->task();
        std::span<const float> own;
        if (member.wants_logits) own = std::span<const float>(logits).subspan(vocab * row++, vocab);
        if (member.prefill) {
          Guarded(*member.running, [&] { task.AcceptPrefilled(own); }, failed, why);
        } else {
          Guarded(*member.running, [&] { task.AcceptDecodeLogits(own); }, failed, why);
        }
      }
    }
  }
  for (auto& [layer, group] : traced_groups) {
    std::vector<int32_t> tokens;
    std::vector<model::KvCache*> caches;
    for (RunningTurn* running : group) {
      tokens.push_back(running->turn->task().decode_token());
      caches.push_back(&running->turn->task().cache());
    }
    model::AttentionTrace trace{layer, {}};
    std::vector<float> logits;  // [B, V]
    const Status decoded = Catching([&] {
      logits = state_->language_model().Decode(tokens, caches, &trace);
      return Status::Ok();
    });
    if (!decoded.ok()) {
      for (RunningTurn* running : group) {
        failed.push_back(running);
        why.push_back(decoded);
      }
      continue;
    }
    const size_t vocab = logits.size() / group.size();
    ++state_->decode_steps;
    state_->decode_rows += group.size();
    for (size_t b = 0; b < group.size(); ++b) {
      std::vector<float> row;
      if (b < trace.rows.size()) row = std::move(trace.rows[b]);
      RunningTurn& running = *group[b];
      const std::span<const float> row_logits(logits.data() + b * vocab, vocab);
      Guarded(running, [&] { running.turn->task().AcceptDecodeLogits(row_logits, std::move(row)); }, failed, why);
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
  // The model kernels' threads (prefill, decode, the uncached forward).
  auto pool = std::make_shared<kernels::WorkerPool>(std::max(options.threads, 1));
  common::StatusOr<std::unique_ptr<model::Model>> model =
      model::LoadModelDir(model_dir, std::move(pool), options.model_options);
  if (!model.ok()) return model.status();
  return std::make_unique<Engine>(std::move(model).value(), std::move(options));
}

}  // namespace niels::daemon::engine
