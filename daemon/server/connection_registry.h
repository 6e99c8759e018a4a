#pragma once
// ConnectionRegistry: the set of live connections, so shutdown can stop them all, Stats can report
// how many there are (and how many were refused), and the accept loop can enforce the connection
// limits (in all and per uid).
//
// Threading: every method is thread-safe (one mutex). Connections add themselves when they start
// and remove themselves when they stop; StopAll() and DrainAll() call into connections without
// holding the lock.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace niels::daemon::server {

class Connection;

class ConnectionRegistry {
 public:
  ConnectionRegistry() = default;
  ConnectionRegistry(const ConnectionRegistry&) = delete;
  ConnectionRegistry& operator=(const ConnectionRegistry&) = delete;

  /// Adds a started connection. The registry keeps it alive until Remove().
  void Add(std::shared_ptr<Connection> connection);
  /// Removes a connection (no-op when absent).
  void Remove(const Connection* connection);
  /// Closes every connection now: in-flight requests are cancelled, queued output is dropped.
  void StopAll();
  /// Asks every connection to write what it has queued and then close (see Connection::Drain).
  void DrainAll();
  /// Number of live connections.
  size_t size() const;
  /// Number of live connections of peer `uid`.
  size_t CountFor(uint32_t uid) const;
  /// Counts one connection refused at accept time (over a limit, or out of fds).
  void CountRefused() { refused_total_.fetch_add(1, std::memory_order_relaxed); }
  /// Connections refused since start (Stats.connections_refused_total).
  uint64_t refused_total() const { return refused_total_.load(std::memory_order_relaxed); }

 private:
  std::vector<std::shared_ptr<Connection>> Snapshot() const;

  mutable std::mutex mutex_;
  std::unordered_set<std::shared_ptr<Connection>> connections_;  // GUARDED_BY(mutex_)
  std::unordered_map<uint32_t, size_t> per_uid_;                   // GUARDED_BY(mutex_)
  std::atomic<uint64_t> refused_total_{0};
};

}  // namespace niels::daemon::server
