#include "daemon/server/connection_registry.h"

#include <utility>

#include "daemon/server/connection.h"

namespace niels::daemon::server {

void ConnectionRegistry::Add(std::shared_ptr<Connection> connection) {
  std::lock_guard lock(mutex_);
  const uint32_t uid = connection->peer_uid();
  if (connections_.insert(std::move(connection)).second) ++per_uid_[uid];
}

void ConnectionRegistry::Remove(const Connection* connection) {
  std::lock_guard lock(mutex_);
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->get() == connection) {
      const uint32_t uid = connection->peer_uid();
      if (--per_uid_[uid] == 0) per_uid_.erase(uid);
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

size_t ConnectionRegistry::CountFor(uint32_t uid) const {
  std::lock_guard lock(mutex_);
  auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

}  // namespace niels::daemon::server
