#include "daemon/engine/session_store.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

SessionStore::SessionStore(const model::ModelConfig& config, SessionStoreOptions options)
    : config_(config), options_(options) {}

namespace {

// A session id as error messages show it: a client-supplied id can be megabytes long, so only its
// start is echoed.
std::string DisplayId(const std::string& id) {
  constexpr size_t kShown = 40;
  if (id.size() <= kShown) return id;
  return fmt::format("{}... ({} bytes)", id.substr(0, kShown), id.size());
}

}  // namespace

bool SessionStore::MayUse(const Session& session, uint32_t caller) const {
  return session.owner() == caller || (caller == 0 && options_.allow_root);
}

Status SessionStore::CheckRoomFor(uint32_t owner) const {
  if (sessions_.size() >= options_.max_sessions) {
    return Status::ResourceExhausted(
        fmt::format("too many sessions ({} of {}): delete one first", sessions_.size(), options_.max_sessions));
  }
  auto own = sessions_per_uid_.find(owner);
  const uint32_t count = own == sessions_per_uid_.end() ? 0 : own->second;
  if (count >= options_.max_sessions_per_uid) {
    return Status::ResourceExhausted(fmt::format(
        "uid {} has {} sessions, the limit per user (--max-sessions-per-uid): delete one first", owner,
        count));
  }
  return Status::Ok();
}

std::string SessionStore::UniqueId() const {
  std::string id = NewSessionId();
  while (sessions_.count(id) != 0) id = NewSessionId();
  return id;
}

StatusOr<Session*> SessionStore::Create(uint32_t owner) {
  NIELS_RETURN_IF_ERROR(CheckRoomFor(owner));
  std::string id = UniqueId();
  auto session = std::make_unique<Session>(id, owner, config_);
  session->Touch(++tick_);
  Session* raw = session.get();
  sessions_.emplace(std::move(id), std::move(session));
  ++sessions_per_uid_[owner];
  return raw;
}

StatusOr<Session*> SessionStore::Find(const std::string& id, uint32_t caller) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return Status::NotFound(fmt::format("unknown session '{}'", DisplayId(id)));
  if (!MayUse(*it->second, caller)) {
    return Status::PermissionDenied(fmt::format("session '{}' belongs to another user", DisplayId(id)));
  }
  it->second->Touch(++tick_);
  return it->second.get();
}

StatusOr<Session*> SessionStore::Fork(const std::string& id, uint32_t caller) {
  StatusOr<Session*> source = Find(id, caller);
  if (!source.ok()) return source.status();
  NIELS_RETURN_IF_ERROR(CheckRoomFor(caller));
  const uint64_t source_bytes = static_cast<uint64_t>((*source)->kv_bytes());
  // The copy must fit beside the source (which stays protected from eviction).
  EvictFor(*source, 2 * source_bytes);
  const bool with_cache = kv_bytes() + source_bytes <= options_.kv_budget_bytes;
  std::string new_id = UniqueId();
  std::unique_ptr<Session> fork = (*source)->Fork(new_id, caller, with_cache);
  fork->Touch(++tick_);
  Session* raw = fork.get();
  sessions_.emplace(std::move(new_id), std::move(fork));
  ++sessions_per_uid_[caller];
  return raw;
}

Status SessionStore::Delete(const std::string& id, uint32_t caller) {
  StatusOr<Session*> session = Find(id, caller);
  if (!session.ok()) return session.status();
  const uint32_t owner = (*session)->owner();
  sessions_.erase(id);
  if (--sessions_per_uid_[owner] == 0) sessions_per_uid_.erase(owner);
  return Status::Ok();
}

size_t SessionStore::ExpireIdle(std::chrono::steady_clock::time_point cutoff) {
  size_t expired = 0;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    const Session& session = *it->second;
    if (&session == busy_ || session.last_used() >= cutoff) {
      ++it;
      continue;
    }
    const uint32_t owner = session.owner();
    it = sessions_.erase(it);
    if (--sessions_per_uid_[owner] == 0) sessions_per_uid_.erase(owner);
    ++expired;
  }
  return expired;
}

std::vector<const Session*> SessionStore::List(uint32_t caller) const {
  std::vector<const Session*> own;
  for (const auto& [id, session] : sessions_) {
    if (session->owner() == caller) own.push_back(session.get());
  }
  std::sort(own.begin(), own.end(), [](const Session* a, const Session* b) {
    return a->created_unix_s() < b->created_unix_s();
  });
  return own;
}

uint64_t SessionStore::BytesForTokens(int64_t tokens) const {
  const uint64_t per_token = 2ull * config_.layers * config_.width * sizeof(float);
  return per_token * static_cast<uint64_t>(std::max<int64_t>(tokens, 0));
}

uint64_t SessionStore::kv_bytes() const {
  uint64_t total = 0;
  for (const auto& [id, session] : sessions_) total += static_cast<uint64_t>(session->kv_bytes());
  return total;
}

Session* SessionStore::PickVictim(const Session* active, uint64_t active_bytes) const {
  // Cache bytes per owner, the active session counted at the size it is about to need.
  std::map<uint32_t, uint64_t> held;
  for (const auto& [id, session] : sessions_) {
    if (session.get() != active && session->kv_bytes() > 0) held[session->owner()] += session->kv_bytes();
  }
  if (active) held[active->owner()] += active_bytes;
  const uint64_t fair_share = held.empty() ? options_.kv_budget_bytes : options_.kv_budget_bytes / held.size();
  Session* victim = nullptr;
  bool victim_over_share = false;
  for (const auto& [id, session] : sessions_) {
    if (session.get() == active || session.get() == busy_ || session->kv_bytes() == 0) continue;
    const bool over_share = held[session->owner()] > fair_share;
    const bool better = !victim || (over_share && !victim_over_share) ||
                        (over_share == victim_over_share && session->last_use_tick() < victim->last_use_tick());
    if (better) {
      victim = session.get();
      victim_over_share = over_share;
    }
  }
  return victim;
}

void SessionStore::EvictFor(const Session* active, uint64_t active_bytes) {
  uint64_t others = kv_bytes() - (active ? static_cast<uint64_t>(active->kv_bytes()) : 0);
  while (others > 0 && others + active_bytes > options_.kv_budget_bytes) {
    Session* victim = PickVictim(active, active_bytes);
    if (!victim) break;
    others -= static_cast<uint64_t>(victim->kv_bytes());
    victim->DropCache();
    ++evictions_;
  }
}

Status SessionStore::Reserve(const Session* active, uint64_t expected_bytes) {
  if (expected_bytes > options_.kv_budget_bytes) {
    return Status::ResourceExhausted(fmt::format(
        "this request needs about {} bytes of KV cache, more than the budget of {} bytes",
        expected_bytes, options_.kv_budget_bytes));
  }
  EvictFor(active, expected_bytes);
  return Status::Ok();
}

void SessionStore::Trim(const Session* active) {
  EvictFor(active, active ? static_cast<uint64_t>(active->kv_bytes()) : 0);
}

}  // namespace niels::daemon::engine
