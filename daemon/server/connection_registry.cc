#include "daemon/server/connection_registry.h"

#include <utility>

#include "daemon/server/connection.h"

namespace niels::daemon::server {

void ConnectionRegistry::Add(std::shared_ptr<Connection> connection) {
  std::lock_guard lock(mutex_);
  connections_.insert(std::move(connection));
}

void ConnectionRegistry::Remove(const Connection* connection) {
  std::lock_guard lock(mutex_);
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->get() == connection) {
      connections_.erase(it);
      return;
    }
  }
}

std::vector<std::shared_ptr<Connection>> ConnectionRegistry::Snapshot() const {
  std::lock_guard lock(mutex_);
  return {connections_.begin(), connections_.end()};
}

void ConnectionRegistry::StopAll() {
  for (const auto& connection : Snapshot()) connection->Stop();
}

void ConnectionRegistry::DrainAll() {
  for (const auto& connection : Snapshot()) connection->Drain();
}

size_t ConnectionRegistry::size() const {
  std::lock_guard lock(mutex_);
  return connections_.size();
}

}  // namespace niels::daemon::server
