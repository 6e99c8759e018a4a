#pragma once
// FrontState: what the HTTP front and its connections share, owned jointly (a connection may
// outlive the front object by the time its coroutines unwind): the options, the service, the live
// connections with their count per owner (a peer uid, or on TCP the principal of the
// connection's latest request; a TCP connection before its first request counts in all only), the
// shutting-down flag and the cached model identity.
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

#include "common/owner.h"
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

  // `owner`: whom the connection counts for (nullopt: nobody yet).
  void Add(const std::shared_ptr<HttpConnection>& connection, std::optional<common::OwnerId> owner);
  void Remove(const HttpConnection* connection, std::optional<common::OwnerId> owner);
  // Counts a connection for `to` instead of `from`; false (and nothing changed) when `to` already
  // has `limit` connections.
  bool Rebind(std::optional<common::OwnerId> from, common::OwnerId to, size_t limit);
  size_t size() const;
  size_t CountFor(common::OwnerId owner) const;
  std::vector<std::shared_ptr<HttpConnection>> Snapshot() const;

  std::optional<ModelView> model() const;
  void set_model(ModelView model);

 private:
  mutable std::mutex mutex_;
  std::unordered_set<std::shared_ptr<HttpConnection>> connections_;  // GUARDED_BY(mutex_)
  std::unordered_map<common::OwnerId, size_t> per_owner_;             // GUARDED_BY(mutex_)
  std::optional<ModelView> model_;                                     // GUARDED_BY(mutex_)
};

}  // namespace niels::daemon::http
