#pragma once
// JobQueue: the engine's queue of requests waiting for the engine thread, and the rules of which
// one may run next (the Scheduling paragraph of daemon/engine/engine.h):
//   - fairness: PopNext() goes round robin over the uids with queued jobs, each uid's jobs in
//     submission order;
//   - per-session order: a job never runs before an earlier-submitted job that names the same
//     session (as the session it works on, or as the source of a fork);
//   - PopQuick() takes the jobs that need no generation and may run between the decode steps of a
//     generation on another session.
//
// Not thread-safe: the Engine guards its JobQueue with its mutex.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/engine/inference_engine.h"

namespace niels::daemon::engine {

// A job waiting for the engine thread.
struct QueuedJob {
  Job job;
  std::chrono::steady_clock::time_point enqueued;
};

// Jobs in submission order, and which may run next (see the file comment).
class JobQueue {
 public:
  size_t size() const { return jobs_.size(); }
  bool empty() const { return jobs_.empty(); }
  // Queued jobs of `uid`.
  size_t queued_for(uint32_t uid) const;
  void Push(QueuedJob job);
  // Removes and returns the next job to run: round robin over uids, each uid's first job that no
  // earlier job blocks (same session). REQUIRES: !empty().
  QueuedJob PopNext();
  // Removes and returns, in submission order, every job that may run between the decode steps of
  // a generation on `busy_session`: quick kinds whose session neither is busy_session nor is named
  // by a job ahead of them.
  std::vector<QueuedJob> PopQuick(const std::string& busy_session);
  // Sets every queued job's cancel flag.
  void CancelAll();

 private:
  void Erase(std::deque<QueuedJob>::iterator it);

  std::deque<QueuedJob> jobs_;
  std::map<uint32_t, size_t> per_uid_;  // uid -> queued jobs
  std::optional<uint32_t> last_uid_;    // the uid PopNext served last
};

// The session a request names ("" for none): the session of Chat, Generate, Get, Reset and Delete,
// the source session of a Fork.
const std::string& SessionOf(const niels::v1::Request& request);

// Whether a request needs no generation (everything but Chat, Generate and unknown kinds).
bool IsQuick(const niels::v1::Request& request);

}  // namespace niels::daemon::engine
