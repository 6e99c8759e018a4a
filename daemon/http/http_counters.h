#pragma once
// HttpCounters: what the HTTP front counts for /metrics -- requests answered, by endpoint and HTTP
// status. Bounded: the endpoints are the routes' fixed labels and the statuses the few the front
// sends, so the table never grows with what clients send.
//
// Threading: thread-safe (one mutex).

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace niels::daemon::http {

class HttpCounters {
 public:
  // `endpoint` must be one of the routes' static labels (routes.h).
  void Count(const char* endpoint, unsigned status) {
    std::lock_guard lock(mutex_);
    ++requests_[{endpoint, status}];
  }
  std::map<std::pair<std::string, unsigned>, uint64_t> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, unsigned>, uint64_t> requests_;  // GUARDED_BY(mutex_)
};

}  // namespace niels::daemon::http
