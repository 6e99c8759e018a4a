#include "daemon/handlers/compile_worker.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::handlers {

using common::Status;

CompileWorker::CompileWorker(CompileWorkerOptions options) : options_(options) {
  const int threads = std::max(options_.threads, 1);
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

CompileWorker::~CompileWorker() { Shutdown(); }

Status CompileWorker::Submit(Task task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return Status::Unavailable("the daemon is shutting down");
    size_t& of_uid = per_uid_[task.owner].tasks;
    Status refused;
    if (waiting_.size() + compiling_.size() >= options_.max_tasks) {
      refused = common::Refuse(common::BudgetId::kCompileQueue,
                               fmt::format("the constraint compile queue is full ({} compiles queued or running, the "
                                           "limit in all); try again later",
                                           options_.max_tasks));
    } else if (of_uid >= options_.max_tasks_per_uid) {
      refused = common::Refuse(common::BudgetId::kCompileQueuePerUid,
                               fmt::format("{} already has {} constraint compiles queued or running, the limit "
                                           "per user (one compiles at a time); wait for them to finish",
                                           common::DescribeOwner(task.owner), options_.max_tasks_per_uid));
    }
    if (!refused.ok()) {
      if (of_uid == 0) per_uid_.erase(task.owner);
      ++counts_.refused;
      return refused;
    }
    ++of_uid;
    waiting_.push_back(std::move(task));
  }
  wake_.notify_one();
  return Status::Ok();
}

void CompileWorker::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    std::list<Task> left;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      stop_flag_.store(true);
      left.swap(waiting_);
      for (const Task& task : left) {
        if (--per_uid_[task.owner].tasks == 0) per_uid_.erase(task.owner);
      }
      counts_.cancelled += left.size();
    }
    wake_.notify_all();
    for (Task& task : left) task.done(Status::Cancelled("the request was cancelled: the daemon is shutting down"));
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  });
}

CompileWorker::Counts CompileWorker::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

std::vector<CompileWorker::Task> CompileWorker::TakeCancelled() {
  std::vector<Task> cancelled;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (!it->cancel->load()) {
      ++it;
      continue;
    }
    if (--per_uid_[it->owner].tasks == 0) per_uid_.erase(it->owner);
    cancelled.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
  counts_.cancelled += cancelled.size();
  return cancelled;
}

std::list<CompileWorker::Task>::iterator CompileWorker::NextRunnable() {
  auto best = waiting_.end();
  uint64_t best_start = 0;
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (compiling_.contains(it->owner)) continue;
    const uint64_t last_start = per_uid_[it->owner].last_start;
    // Strictly older only: of one uid's tasks, the first in submission order.
    if (best == waiting_.end() || last_start < best_start) {
      best = it;
      best_start = last_start;
    }
  }
  return best;
}

void CompileWorker::Run() {
  std::unique_lock lock(mutex_);
  while (true) {
    std::vector<Task> cancelled = TakeCancelled();
    if (!cancelled.empty()) {
      lock.unlock();
      for (Task& task : cancelled) task.done(Status::Cancelled("the request was cancelled"));
      cancelled.clear();
      lock.lock();
      continue;  // the queue may have changed meanwhile
    }
    if (stopping_) return;
    auto next = NextRunnable();
    if (next == waiting_.end()) {
      // Nothing to take: sleep until a Submit, a finished compile or Shutdown; while tasks wait
      // (behind their uid's running compile), wake up now and then for their cancel flags.
      if (waiting_.empty()) {
        wake_.wait(lock);
      } else {
        wake_.wait_for(lock, options_.cancel_poll);
      }
      continue;
    }
    Task task = std::move(*next);
    waiting_.erase(next);
    compiling_.insert(task.owner);
    per_uid_[task.owner].last_start = ++starts_;
    lock.unlock();
    const std::atomic<bool>& cancel = *task.cancel;
    const Status status = task.run([this, &cancel] { return cancel.load() || stop_flag_.load(); });
    lock.lock();
    compiling_.erase(task.owner);
    if (--per_uid_[task.owner].tasks == 0) per_uid_.erase(task.owner);
    ++counts_.compiled;
    if (status.code() == common::StatusCode::kCancelled) ++counts_.cancelled;
    if (status.code() == common::StatusCode::kResourceExhausted) ++counts_.exhausted;
    lock.unlock();
    wake_.notify_all();  // the uid's next task may run now, on any thread
    task.done(status);
    task = Task();  // what it holds of the request is released before the lock is taken again
    lock.lock();
  }
}

}  // namespace niels::daemon::handlers
