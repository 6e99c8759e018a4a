#pragma once
// CompileWorker: the threads on which client-supplied text (a request's JSON Schema or GBNF
// constraint) is compiled, so that neither an IO thread (whose connections would all stall) nor the
// engine thread (where every running request decodes) ever runs it. handlers::Service hands it one
// task per request that carries such text and forwards the request to the engine once compiled;
// and one task per background request (WeightStats, which reads the immutable weights), answered
// by the task itself.
//
// Bounds (CompileWorkerOptions): a fixed number of threads; at most `max_tasks` tasks queued or
// compiling in all and `max_tasks_per_uid` per uid, of which at most ONE of a uid compiles at a
// time (the others wait in submission order while other uids' tasks run). Submit refuses a task
// beyond either limit with RESOURCE_EXHAUSTED naming it. How much one compile may do is the
// compiler's own step budget (daemon/grammar); the worker bounds how many run and wait.
//
// Fairness: a free thread takes the oldest waiting task of the uid whose last compile started
// longest ago (a uid new to the worker first), so a uid with many queued compiles delays another
// uid's by at most one compile per thread.
//
// Cancellation: a task carries its request's cancel flag (set by Cancel, a disconnect or a refused
// event). A queued task whose flag is set is answered CANCELLED without compiling: looked for by
// every thread that is free (before it takes a task, and every `cancel_poll` while the waiting
// tasks' uids are all compiling). A compiling task gets a `cancelled` predicate (its flag, or the
// worker shutting down) that the compile polls.
//
// Every task ends in exactly one call of `done`: after `run`, with its status (the counts and the
// uid's slot already updated), or instead of it (CANCELLED while waiting or at Shutdown); on a
// worker thread or in Shutdown.
//
// Threading: Submit(), Shutdown() and counts() are thread-safe.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/budgets.h"
#include "common/owner.h"
#include "common/status.h"

namespace niels::daemon::handlers {

struct CompileWorkerOptions {
  int threads = 2;                // compiles running at once (of different uids), at least 1
  size_t max_tasks = common::kCompileQueueLimit;          // queued + compiling, in all
  // Queued + compiling of one uid (one compiling, the others waiting): a client's batch of
  // structured requests as large as a decode batch (EngineOptions::max_batch) is taken whole.
  size_t max_tasks_per_uid = common::kCompileQueuePerUidLimit;
  // How often waiting tasks' cancel flags are looked at while no thread is free to take them.
  std::chrono::milliseconds cancel_poll{50};
};

class CompileWorker {
 public:
  // True once the task's request was cancelled or the worker is shutting down: the compile then
  // stops at its next check and the request ends CANCELLED.
  using Cancelled = std::function<bool()>;

  struct Task {
    common::OwnerId owner = 0;  // whose request (a uid or an API-key principal)
    std::shared_ptr<std::atomic<bool>> cancel;  // never null
    // Compiles (keeping the result where `done` finds it) and returns the compile's status
    // (CANCELLED, RESOURCE_EXHAUSTED for a spent budget, ...).
    std::function<common::Status(const Cancelled& cancelled)> run;
    // Passes the outcome on: run's status, or CANCELLED without running (the task's flag was set
    // while it waited, or the worker shut down).
    std::function<void(const common::Status& status)> done;
  };

  // Counts since the worker started (for Stats).
  struct Counts {
    uint64_t compiled = 0;   // tasks run (whatever their outcome)
    uint64_t refused = 0;    // refused by Submit: the limit in all or per uid
    uint64_t cancelled = 0;  // answered CANCELLED: skipped while waiting, or their compile stopped
    uint64_t exhausted = 0;  // compiles that ended RESOURCE_EXHAUSTED (a compile budget spent)
  };

  explicit CompileWorker(CompileWorkerOptions options = {});
  ~CompileWorker();  // Shutdown()
  CompileWorker(const CompileWorker&) = delete;
  CompileWorker& operator=(const CompileWorker&) = delete;

  // Queues the task and returns OK, or refuses it without taking it (the caller answers):
  // RESOURCE_EXHAUSTED beyond max_tasks or max_tasks_per_uid, UNAVAILABLE after Shutdown.
  common::Status Submit(Task task);
  // Stops taking tasks, ends every waiting task through `done` (CANCELLED), makes running
  // compiles' `cancelled` true, and returns when the threads have stopped. Idempotent.
  void Shutdown();

  Counts counts() const;
  const CompileWorkerOptions& options() const { return options_; }

 private:
  void Run();
  // Takes the waiting tasks whose cancel flag is set out of the queue. REQUIRES: mutex_ held.
  std::vector<Task> TakeCancelled();
  // The task to run next (see Fairness) among those whose uid has no compile running, or end().
  // REQUIRES: mutex_ held.
  std::list<Task>::iterator NextRunnable();

  const CompileWorkerOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  struct UidShare {
    size_t tasks = 0;         // waiting + compiling
    uint64_t last_start = 0;  // starts_ when its last compile started; 0: none since it came
  };
  std::list<Task> waiting_;                // guarded by mutex_, in submission order
  std::map<common::OwnerId, UidShare> per_uid_;  // guarded by mutex_: owners with tasks
  std::set<common::OwnerId> compiling_;          // guarded by mutex_: owners with a compile running
  uint64_t starts_ = 0;                    // guarded by mutex_: compiles started
  bool stopping_ = false;                  // guarded by mutex_
  std::atomic<bool> stop_flag_{false};     // read by running compiles' `cancelled`
  Counts counts_;                          // guarded by mutex_
  std::vector<std::thread> threads_;
  std::once_flag shutdown_once_;
};

}  // namespace niels::daemon::handlers
