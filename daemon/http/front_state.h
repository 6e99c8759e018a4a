#pragma once
// FrontState: what the HTTP front and its connections share, owned jointly (a connection may
// outlive the front object by the time its coroutines unwind): the options, the service, the live
// connections with their count per uid, the shutting-down flag and the cached model identity.
//
// Threading: every member is thread-safe (a mutex or an atomic).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/http/exchange.h"
#include "daemon/http/http_counters.h"
#include "daemon/http/http_options.h"
#include "daemon/server/request_service.h"

namespace niels::daemon::http {

class HttpConnection;

class FrontState {
 public:
  explicit FrontState(HttpOptions options) : options(std::move(options)) {}

  const HttpOptions options;
  std::atomic<server::RequestService*> service{nullptr};
  std::atomic<bool> shutting_down{false};
  HttpCounters counters;

  void Add(const std::shared_ptr<HttpConnection>& connection, uint32_t uid);
  void Remove(const HttpConnection* connection, uint32_t uid);
  size_t size() const;
  size_t CountFor(uint32_t uid) const;
  std::vector<std::shared_ptr<HttpConnection>> Snapshot() const;

  std::optional<ModelView> model() const;
  void set_model(ModelView model);

 private:
  mutable std::mutex mutex_;
  std::unordered_set<std::shared_ptr<HttpConnection>> connections_;  // GUARDED_BY(mutex_)
  std::unordered_map<uint32_t, size_t> per_uid_;                       // GUARDED_BY(mutex_)
  std::optional<ModelView> model_;                                     // GUARDED_BY(mutex_)
};

}  // namespace niels::daemon::http
