#include "daemon/engine/session_store.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

SessionStore::SessionStore(const model::ModelConfig& config, SessionStoreOptions options)
    : config_(config), options_(options) {}

bool SessionStore::MayUse(const Session& session, uint32_t caller) const {
  return session.owner() == caller || (caller == 0 && options_.allow_root);
}

std::string SessionStore::UniqueId() const {
  std::string id = NewSessionId();
  while (sessions_.count(id) != 0) id = NewSessionId();
  return id;
}

StatusOr<Session*> SessionStore::Create(uint32_t owner) {
  if (sessions_.size() >= options_.max_sessions) {
    return Status::ResourceExhausted(
        fmt::format("too many sessions ({} of {}): delete one first", sessions_.size(), options_.max_sessions));
  }
  std::string id = UniqueId();
  auto session = std::make_unique<Session>(id, owner, config_);
  session->Touch(++tick_);
  Session* raw = session.get();
  sessions_.emplace(std::move(id), std::move(session));
  return raw;
}

StatusOr<Session*> SessionStore::Find(const std::string& id, uint32_t caller) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return Status::NotFound(fmt::format("unknown session '{}'", id));
  if (!MayUse(*it->second, caller)) {
    return Status::PermissionDenied(fmt::format("session '{}' belongs to another user", id));
  }
  it->second->Touch(++tick_);
  return it->second.get();
}

StatusOr<Session*> SessionStore::Fork(const std::string& id, uint32_t caller) {
  StatusOr<Session*> source = Find(id, caller);
  if (!source.ok()) return source.status();
  if (sessions_.size() >= options_.max_sessions) {
    return Status::ResourceExhausted(
        fmt::format("too many sessions ({} of {}): delete one first", sessions_.size(), options_.max_sessions));
  }
  const uint64_t source_bytes = static_cast<uint64_t>((*source)->kv_bytes());
  // The copy must fit beside the source (which stays protected from eviction).
  EvictFor(*source, 2 * source_bytes);
  const bool with_cache = kv_bytes() + source_bytes <= options_.kv_budget_bytes;
  std::string new_id = UniqueId();
  std::unique_ptr<Session> fork = (*source)->Fork(new_id, caller, with_cache);
  fork->Touch(++tick_);
  Session* raw = fork.get();
  sessions_.emplace(std::move(new_id), std::move(fork));
  return raw;
}

Status SessionStore::Delete(const std::string& id, uint32_t caller) {
  StatusOr<Session*> session = Find(id, caller);
  if (!session.ok()) return session.status();
  sessions_.erase(id);
  return Status::Ok();
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

void SessionStore::EvictFor(const Session* active, uint64_t active_bytes) {
  uint64_t others = kv_bytes() - (active ? static_cast<uint64_t>(active->kv_bytes()) : 0);
  while (others > 0 && others + active_bytes > options_.kv_budget_bytes) {
    Session* victim = nullptr;
    for (const auto& [id, session] : sessions_) {
      if (session.get() == active || IsBusy(session.get()) || session->kv_bytes() == 0) continue;
      if (!victim || session->last_use_tick() < victim->last_use_tick()) victim = session.get();
    }
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

Status SessionStore::Admit(const Session* session, uint64_t expected_bytes, bool* must_wait) {
  *must_wait = false;
  if (expected_bytes > options_.kv_budget_bytes) {
    return Status::ResourceExhausted(fmt::format(
        "this request needs about {} bytes of KV cache, more than the budget of {} bytes",
        expected_bytes, options_.kv_budget_bytes));
  }
  uint64_t held = 0;  // what the running turns hold or may grow to
  for (const auto& [busy, reserved] : busy_) {
    if (busy != session) held += std::max(reserved, static_cast<uint64_t>(busy->kv_bytes()));
  }
  if (held + expected_bytes > options_.kv_budget_bytes) {
    *must_wait = true;
    return Status::Ok();
  }
  EvictFor(session, expected_bytes);
  MarkBusy(session, expected_bytes);
  return Status::Ok();
}

void SessionStore::Trim(const Session* active) {
  EvictFor(active, active ? static_cast<uint64_t>(active->kv_bytes()) : 0);
}

}  // namespace niels::daemon::engine
