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
#include "daemon/tool_calls/template_family.h"
#include "daemon/engine/turn.h"
#include "daemon/kernels/heap_tuning.h"
#include "daemon/text/generic_tool_format.h"

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

namespace {

// The model's chat format, or why it has none (logged once: Chat requests fail with it).
std::unique_ptr<text::ChatFormat> MakeModelChatFormat(const loaders::Model& model, Status& status) {
  text::ChatFormatSource source;
  source.tokenizer = model.tokenizer.get();
  source.special = model.special;
  source.stop_ids = model.stop_ids;
  source.chat_template = model.chat_template;
  source.bos_token = model.bos_token;
  source.eos_token = model.eos_token;
  source.add_bos_id = model.add_bos_id;
  common::StatusOr<std::unique_ptr<text::ChatFormat>> format = text::MakeChatFormat(source);
  if (!format.ok()) {
    status = format.status();
    common::LogWarn("chat: {}; Chat requests will fail, Generate works", status.message());
    return nullptr;
  }
  // A template without tool support gets tools through the generic tool format.
  if ((*format)->kind() == text::ChatFormat::Kind::kTemplate &&
      !tool_calls::ToolCallFamilyOfTemplate(model.chat_template)) {
    return std::make_unique<text::GenericToolChatFormat>(std::move(format).value());
  }
  return std::move(format).value();
}

}  // namespace

EngineState::EngineState(std::unique_ptr<loaders::Model> loaded, const EngineOptions& engine_options)
    : model(std::move(loaded)),
      options(engine_options),
      chat_format_(MakeModelChatFormat(*model, chat_format_status)),
      spiller(model->config, engine_options.model_options.kv_dtype, engine_options.durable),
      sessions(std::make_shared<model::KvPool>(model->config, engine_options.kv_budget_bytes,
                                               engine_options.model_options.kv_dtype),
               engine_options.session_limits, spiller, engine_options.durable),
      kv(sessions, spiller),
      started(Clock::now()) {
  tool_grammars.SetLimits(engine_options.tool_grammar_bytes, engine_options.tool_grammar_bytes_per_uid);
  if (chat_format_ != nullptr) {
    tool_call_family =
        tool_calls::ToolCallFamilyOfTemplate(model->chat_template).value_or(tool_calls::ToolCallFamily::kGenericJson);
  }
  if (chat_format_ != nullptr && chat_format_->kind() == text::ChatFormat::Kind::kTokenNative) {
    Status unused;
    conversation_format_ = std::make_unique<text::GenericToolChatFormat>(MakeModelChatFormat(*model, unused));
  }
  // Structured output's view of the tokenizer, once per model (output_constraint.h).
  auto vocabulary = ConstraintVocabulary::Build(*model->tokenizer, static_cast<int32_t>(model->config.vocab_size),
                                                  model->stop_ids);
  if (vocabulary.ok()) {
    constraint_vocabulary = std::move(vocabulary).value();
  } else {
    common::LogWarn("structured output is off for this model: {}", vocabulary.status().message());
  }
}

Engine::Engine(std::unique_ptr<loaders::Model> model, EngineOptions options)
    : options_(std::move(options)),
      state_(std::make_unique<EngineState>(std::move(model), options_)),
      planner_(std::max<int64_t>(options_.prefill_chunk, 1)) {
  options_.max_batch = std::max<uint32_t>(options_.max_batch, 1);
  if (options_.max_running_per_uid == 0) options_.max_running_per_uid = std::max<uint32_t>(options_.max_batch - 1, 1);
  options_.prefill_chunk = std::max<int64_t>(options_.prefill_chunk, 1);
  thread_ = std::thread([this] { Run(); });
}

Engine::~Engine() { Shutdown(); }

const loaders::Model& Engine::model() const { return *state_->model; }

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
    } else if (QueuedFor(work.owner) >= options_.max_queued_per_uid) {
      refused = Status::ResourceExhausted(fmt::format(
          "{} already has {} requests queued, the limit per user (--max-queued-per-uid); wait "
          "for some to finish",
          common::DescribeOwner(work.owner), options_.max_queued_per_uid));
    } else {
      work.enqueued = Clock::now();
      queue_.push_back(std::move(work));
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
      for (Work& queued : queue_) queued.cancel->store(true);
      for (const auto& cancel : held_cancels_) cancel->store(true);
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  });
}

void Engine::Run() {
  if (options_.threads > 0) kernels::TuneHeapForActivations();
  const Clock::duration expiry_period = ExpiryCheckPeriod(options_.idle_session_timeout);
  while (true) {
    {
      std::unique_lock lock(mutex_);
      while (running_.empty() && waiting_.empty() && !stopping_ && queue_.empty()) {
        wake_.wait_for(lock, expiry_period);
        if (queue_.empty() && !stopping_) {
          lock.unlock();
          if (heap_to_release_) {  // idle for a period: the activation buffers go back to the kernel
            state_->language_model().ReleaseScratch();
            kernels::ReleaseFreedHeapMemory();
            heap_to_release_ = false;
          }
          ExpireIdleSessions();
          lock.lock();
        }
      }
      for (Work& queued : queue_) {
        if (stopping_) queued.cancel->store(true);  // everything ends CANCELLED
        held_cancels_.insert(queued.cancel);
        ++waiting_per_uid_[queued.owner];
        waiting_.push_back(std::move(queued));
      }
      queue_.clear();
      waiting_count_ = waiting_.size();
      if (stopping_ && running_.empty() && waiting_.empty()) return;
    }
    ExpireIdleSessions();
    AnswerCancelledWaiting();
    iteration_ = IterationWork{};
    const uint64_t prefilled_before = state_->tokens_prefilled_total;
    ServeWaiting();
    iteration_.start_prefill_tokens = static_cast<int64_t>(state_->tokens_prefilled_total - prefilled_before);
    UpdateFigures();
    const bool model_work = !running_.empty();
    if (model_work) {
      const Clock::time_point start = Clock::now();
      RunModelWork();
      heap_to_release_ = true;
      RetireFinished();
      ++state_->iterations;
      state_->busy_s += std::chrono::duration<double>(Clock::now() - start).count();
    }
    if (options_.on_iteration && (model_work || iteration_.quick_answered > 0 || iteration_.admitted > 0)) {
      options_.on_iteration(iteration_);
    }
  }
}

void Engine::ExpireIdleSessions() {
  const Clock::time_point now = Clock::now();
  if (now < next_expiry_check_) return;
  next_expiry_check_ = now + ExpiryCheckPeriod(options_.idle_session_timeout);
  if (const state::DurableStore* durable = options_.durable; durable && durable->options().session_ttl_s > 0) {
    const size_t deleted = state_->sessions.ExpireStored(sessions::UnixNow() - durable->options().session_ttl_s);
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
    if (it->cancel->load()) {
      ++state_->requests_total;
      FinishWithError(*it, CancelledStatus());
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
  for (const auto& turn : running_) named.insert(turn->session().id());
  struct Candidate {
    std::list<Work>::iterator it;
    bool blocked;
  };
  std::map<common::OwnerId, std::vector<Candidate>> by_uid;
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    const std::string& session = it->session_id;
    const bool blocked = !session.empty() && !named.insert(session).second;
    by_uid[it->owner].push_back({it, blocked});
  }
  // Fairness between users: round robin over the uids, starting after the uid served last.
  std::vector<common::OwnerId> uids;
  auto start = last_served_uid_ ? by_uid.upper_bound(*last_served_uid_) : by_uid.begin();
  for (auto it = start; it != by_uid.end(); ++it) uids.push_back(it->first);
  for (auto it = by_uid.begin(); it != start; ++it) uids.push_back(it->first);
  size_t most = 0;
  for (const auto& [uid, jobs] : by_uid) most = std::max(most, jobs.size());
  // What starting requests may cost this iteration: at least one request, then no more once the
  // next would pass kStartBytesPerIteration; the rest wait for the next iteration (after a step).
  uint64_t started_bytes = 0;
  bool started_any = false;
  std::set<common::OwnerId> deferred;  // uids whose next request waits for the next iteration
  auto affordable = [&](const Work& work) {
    return !started_any || started_bytes + work.request_bytes <= kStartBytesPerIteration;
  };
  auto started = [&](uint64_t bytes, common::OwnerId uid) {
    started_any = true;
    started_bytes += bytes;
    last_served_uid_ = uid;
  };
  for (size_t round = 0; round < most; ++round) {
    for (common::OwnerId uid : uids) {
      std::vector<Candidate>& jobs = by_uid[uid];
      if (round >= jobs.size() || jobs[round].blocked) continue;
      Candidate& candidate = jobs[round];
      if (deferred.count(uid) != 0) continue;  // keeps its order behind its deferred request
      if (!affordable(*candidate.it)) {
        deferred.insert(uid);  // waits for the next iteration
        continue;
      }
      const uint64_t bytes = candidate.it->request_bytes;
      if (candidate.it->quick) {
        Work work = std::move(*candidate.it);
        Unwait(candidate.it);
        ExecuteQuick(work);
        started(bytes, uid);
        continue;
      }
      // Work that must keep waiting also holds back later work on its session (marked blocked
      // above, being later in submission order).
      if (TryAdmit(*candidate.it)) {
        Unwait(candidate.it);
        started(bytes, uid);
      }
    }
  }
}

void Engine::Unwait(std::list<Work>::iterator it) {
  {
    std::lock_guard lock(mutex_);
    const common::OwnerId uid = it->owner;
    if (--waiting_per_uid_[uid] == 0) waiting_per_uid_.erase(uid);
    --waiting_count_;
  }
  waiting_.erase(it);
}

size_t Engine::QueuedFor(common::OwnerId uid) const {
  size_t queued = 0;
  for (const Work& item : queue_) queued += item.owner == uid ? 1 : 0;
  auto it = waiting_per_uid_.find(uid);
  return queued + (it == waiting_per_uid_.end() ? 0 : it->second);
}

namespace {

// Records how long `work` waited before the engine thread started it.
void MarkStarted(Work& work) {
  work.queue_ms = std::chrono::duration<double, std::milli>(Clock::now() - work.enqueued).count();
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

void Engine::ExecuteQuick(Work& work) {
  ++state_->requests_total;
  ++iteration_.quick_answered;
  iteration_.started_bytes += work.request_bytes;
  MarkStarted(work);
  state_->queued_requests = static_cast<uint32_t>(waiting_.size());  // Stats sees the live figures
  state_->running_sequences = static_cast<uint32_t>(running_.size());
  // Released first: once answered, a Cancel naming this request finds nothing in flight.
  Release(work);
  const Status status = Catching([&] { return work.quick(*state_, work); });
  if (!status.ok()) work.fail(status);
}

bool Engine::TryAdmit(Work& work) {
  if (running_.size() >= options_.max_batch) return false;
  const auto of_uid = [&](const std::unique_ptr<Turn>& turn) { return turn->work().owner == work.owner; };
  if (static_cast<uint32_t>(std::count_if(running_.begin(), running_.end(), of_uid)) >=
      options_.max_running_per_uid) {
    return false;  // the uid's share of the rows is taken; other uids' work goes first
  }
  MarkStarted(work);
  bool must_wait = false;
  std::unique_ptr<Turn> turn;
  const Status failed = Catching([&]() -> Status {
    // Weights mapped from a file that changed under us would give wrong results (or SIGBUS).
    if (state_->model->weights_file) {
      const Status unchanged = state_->model->weights_file->CheckUnchanged();
      if (!unchanged.ok()) {
        common::LogError("{}", unchanged.message());
        return unchanged;
      }
    }
    TurnResult started = work.start(*state_, work);
    if (!started.ok()) return started.status();
    if (started->wait_for_memory) {
      must_wait = true;
      return Status::Ok();
    }
    turn = std::move(started->turn);
    if (turn == nullptr) return Status::Ok();  // answered at admission: nothing to run
    try {
      turn->Start(options_.prefill_chunk);
    } catch (...) {
      turn->Abort();
      throw;
    }
    return Status::Ok();
  });
  if (must_wait) return false;  // stays in the waiting list, unchanged
  ++state_->requests_total;
  ++iteration_.admitted;
  iteration_.started_bytes += work.request_bytes;
  if (!failed.ok()) {
    turn.reset();
    FinishWithError(work, failed);
    return true;
  }
  if (turn == nullptr) {
    Release(work);
    return true;
  }
  turn->Adopt(std::move(work));
  running_.push_back(std::move(turn));
  return true;
}

namespace {

using Failures = std::vector<std::pair<Turn*, Status>>;

// Runs `step` for one turn; an exception adds the turn to `failed` with the reason.
template <typename Step>
void Guarded(Turn& turn, Step&& step, Failures& failed) {
  try {
    step();
  } catch (const model::KvExhausted& error) {
    failed.emplace_back(&turn, Status::ResourceExhausted(error.what()));
  } catch (const std::exception& error) {
    failed.emplace_back(&turn, Status::Internal(fmt::format("engine error: {}", error.what())));
  }
}

}  // namespace

void Engine::RunModelWork() {
  Failures failed;
  // Cancel and disconnect: every running turn notices within this iteration.
  for (auto& turn : running_) turn->task().PollCancel();
  std::vector<Turn*> running;
  for (auto& turn : running_) running.push_back(turn.get());
  const StepPlan plan = planner_.Plan(running, running_.size() == 1 && waiting_.empty());
  for (const auto& turn : running_) ++iteration_.running_per_uid[turn->work().owner];
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    if (plan.rows[i].prefill) iteration_.prefill_tokens += static_cast<int64_t>(plan.inputs[i].tokens.size());
  }
  iteration_.decode_rows += plan.decode_rows;
  for (const auto& [layer, group] : plan.traced_decodes) iteration_.decode_rows += static_cast<int64_t>(group.size());
  if (plan.traced_prefill != nullptr) RunTracedPrefill(*plan.traced_prefill, failed);
  if (!plan.inputs.empty()) RunBatchedStep(plan, failed);
  for (const auto& [layer, group] : plan.traced_decodes) RunTracedDecodes(layer, group, failed);
  for (auto& [turn, why] : failed) {
    if (turn->finished()) continue;  // already answered (failed twice)
    turn->Abort();
    FinishWithError(turn->work(), why);
  }
}

void Engine::RunTracedPrefill(Turn& turn, Failures& failed) {
  // Its last position goes through Decode to record the attention row.
  const int64_t before = turn.task().cache().length();
  Guarded(turn, [&] { turn.task().PrefillChunk(); }, failed);
  iteration_.prefill_tokens += turn.task().cache().length() - before;
}

void Engine::RunBatchedStep(const StepPlan& plan, Failures& failed) {
  std::vector<float> logits;  // [rows that want logits, V]
  const Status stepped = Catching([&] {
    logits = state_->language_model().Step(plan.inputs);
    return Status::Ok();
  });
  if (!stepped.ok()) {
    for (const StepPlan::Row& row : plan.rows) failed.emplace_back(row.turn, stepped);
    return;
  }
  if (plan.decode_rows > 0) {
    ++state_->decode_steps;
    state_->decode_rows += static_cast<uint64_t>(plan.decode_rows);
  }
  const size_t vocab = static_cast<size_t>(state_->language_model().config().vocab_size);
  size_t sampled = 0;
  for (const StepPlan::Row& row : plan.rows) {
    GenerationTask& task = row.turn->task();
    std::span<const float> own;
    if (row.wants_logits) own = std::span<const float>(logits).subspan(vocab * sampled++, vocab);
    if (row.prefill) {
      Guarded(*row.turn, [&] { task.AcceptPrefilled(own); }, failed);
    } else {
      Guarded(*row.turn, [&] { task.AcceptDecodeLogits(own); }, failed);
    }
  }
}

void Engine::RunTracedDecodes(int64_t layer, const std::vector<Turn*>& group, Failures& failed) {
  std::vector<int32_t> tokens;
  std::vector<model::KvCache*> caches;
  for (Turn* turn : group) {
    tokens.push_back(turn->task().decode_token());
    caches.push_back(&turn->task().cache());
  }
  model::AttentionTrace trace{layer, {}};
  std::vector<float> logits;  // [B, V]
  const Status decoded = Catching([&] {
    logits = state_->language_model().Decode(tokens, caches, &trace);
    return Status::Ok();
  });
  if (!decoded.ok()) {
    for (Turn* turn : group) failed.emplace_back(turn, decoded);
    return;
  }
  const size_t vocab = logits.size() / group.size();
  ++state_->decode_steps;
  state_->decode_rows += group.size();
  for (size_t b = 0; b < group.size(); ++b) {
    std::vector<float> row;
    if (b < trace.rows.size()) row = std::move(trace.rows[b]);
    const std::span<const float> row_logits(logits.data() + b * vocab, vocab);
    Guarded(*group[b], [&] { group[b]->task().AcceptDecodeLogits(row_logits, std::move(row)); }, failed);
  }
}

void Engine::RetireFinished() {
  for (auto it = running_.begin(); it != running_.end();) {
    Turn& turn = **it;
    if (!turn.finished() && !turn.done()) {
      ++it;
      continue;
    }
    if (!turn.finished()) {
      Release(turn.work());
      const Status committed = Catching([&] { return turn.Complete(); });
      if (!committed.ok()) turn.work().fail(committed);
    }
    it = running_.erase(it);  // the session is free for the next request
  }
  planner_.Retired(running_.size());
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
  common::StatusOr<std::unique_ptr<loaders::Model>> model =
      loaders::LoadModel(model_dir, std::move(pool), options.model_options);
  if (!model.ok()) return model.status();
  return std::make_unique<Engine>(std::move(model).value(), std::move(options));
}

}  // namespace niels::daemon::engine
