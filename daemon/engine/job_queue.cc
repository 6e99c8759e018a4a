#include "daemon/engine/job_queue.h"

#include <iterator>
#include <set>
#include <utility>

namespace niels::daemon::engine {

namespace v1 = niels::v1;

const std::string& SessionOf(const v1::Request& request) {
  static const std::string kNone;
  switch (request.kind_case()) {
    case v1::Request::kChat: return request.chat().session_id();
    case v1::Request::kGenerate: return request.generate().session_id();
    case v1::Request::kGetSession: return request.get_session().session_id();
    case v1::Request::kForkSession: return request.fork_session().session_id();
    case v1::Request::kResetSession: return request.reset_session().session_id();
    case v1::Request::kDeleteSession: return request.delete_session().session_id();
    default: return kNone;
  }
}

bool IsQuick(const v1::Request& request) {
  switch (request.kind_case()) {
    case v1::Request::kChat:
    case v1::Request::kGenerate:
    case v1::Request::KIND_NOT_SET:
      return false;
    default:
      return true;
  }
}

size_t JobQueue::queued_for(uint32_t uid) const {
  auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

void JobQueue::Push(QueuedJob job) {
  ++per_uid_[job.job.caller.uid];
  jobs_.push_back(std::move(job));
}

void JobQueue::Erase(std::deque<QueuedJob>::iterator it) {
  const uint32_t uid = it->job.caller.uid;
  if (--per_uid_[uid] == 0) per_uid_.erase(uid);
  jobs_.erase(it);
}

QueuedJob JobQueue::PopNext() {
  // Each uid's first runnable job, in submission order: a job is runnable when no job ahead of it
  // names the same session. The very first job is always runnable, so there is at least one.
  std::map<uint32_t, std::deque<QueuedJob>::iterator> first_runnable;
  std::set<std::string> named_ahead;
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    const std::string& session = SessionOf(it->job.request);
    const bool blocked = !session.empty() && named_ahead.count(session) != 0;
    if (!session.empty()) named_ahead.insert(session);
    if (!blocked) first_runnable.try_emplace(it->job.caller.uid, it);
  }
  // Round robin: the first uid after the one served last, wrapping around.
  auto chosen = last_uid_ ? first_runnable.upper_bound(*last_uid_) : first_runnable.begin();
  if (chosen == first_runnable.end()) chosen = first_runnable.begin();
  last_uid_ = chosen->first;
  QueuedJob job = std::move(*chosen->second);
  Erase(chosen->second);
  return job;
}

std::vector<QueuedJob> JobQueue::PopQuick(const std::string& busy_session) {
  std::vector<QueuedJob> ready;
  std::set<std::string> named_ahead = {busy_session};
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const std::string& session = SessionOf(it->job.request);
    const bool blocked = !session.empty() && named_ahead.count(session) != 0;
    if (IsQuick(it->job.request) && !blocked) {
      ready.push_back(std::move(*it));
      const uint32_t uid = ready.back().job.caller.uid;
      if (--per_uid_[uid] == 0) per_uid_.erase(uid);
      it = jobs_.erase(it);
      continue;
    }
    if (!session.empty()) named_ahead.insert(session);
    ++it;
  }
  return ready;
}

void JobQueue::CancelAll() {
  for (QueuedJob& queued : jobs_) queued.job.cancel->store(true);
}

}  // namespace niels::daemon::engine
